//! Produce (key 0), v3-v9; flexible from v9. v0-v2 carry legacy message
//! sets and are not supported. Record bytes are borrowed from the request
//! buffer; [`crate::record_batch`] decodes them.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// One partition's records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducePartition<'a> {
    /// The partition.
    pub index: i32,
    /// Record batches (v2 format), borrowed; `None` when null.
    pub records: Option<&'a [u8]>,
}

/// One topic's records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopic<'a> {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<ProducePartition<'a>>,
}

/// Produce request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceRequest<'a> {
    /// The transactional id, if any.
    pub transactional_id: Option<String>,
    /// 0 (no answer), 1 (leader), -1 (all in-sync replicas).
    pub acks: i16,
    /// How long to wait for acks.
    pub timeout_ms: i32,
    /// The records per topic.
    pub topics: Vec<ProduceTopic<'a>>,
}

impl<'a> Message<'a> for ProduceRequest<'a> {
    const API_KEY: ApiKey = ApiKey::Produce;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let transactional_id = if version >= 3 {
            r.nullable_string(f)?
        } else {
            None
        };
        let acks = r.i16()?;
        let timeout_ms = r.i32()?;
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let p = ProducePartition {
                    index: r.i32()?,
                    records: r.nullable_bytes(f)?,
                };
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(ProduceTopic { name, partitions })
        })?;
        end(r, f)?;
        Ok(ProduceRequest {
            transactional_id,
            acks,
            timeout_ms,
            topics,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 3 {
            w.put_nullable_str(f, self.transactional_id.as_deref())?;
        }
        w.put_i16(self.acks);
        w.put_i32(self.timeout_ms);
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.index);
                w.put_nullable_bytes(f, p.records)?;
                end_struct(w, f);
                Ok(())
            })?;
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}

/// Why one batch of a partition was rejected (v8+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchIndexError {
    /// The index of the batch in the partition's records.
    pub batch_index: i32,
    /// The message.
    pub batch_index_error_message: Option<String>,
}

/// One partition's produce result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartitionResult {
    /// The partition.
    pub index: i32,
    /// The error.
    pub error_code: i16,
    /// The offset of the first record written.
    pub base_offset: i64,
    /// The append time if the topic uses log-append time, else -1 (v2+).
    pub log_append_time_ms: i64,
    /// The partition's start offset (v5+).
    pub log_start_offset: i64,
    /// Per-batch errors (v8+).
    pub record_errors: Vec<BatchIndexError>,
    /// The error message (v8+).
    pub error_message: Option<String>,
}

impl Default for ProducePartitionResult {
    fn default() -> Self {
        ProducePartitionResult {
            index: 0,
            error_code: 0,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            record_errors: Vec::new(),
            error_message: None,
        }
    }
}

/// One topic's produce results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopicResult {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<ProducePartitionResult>,
}

/// Produce response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceResponse {
    /// Results per topic.
    pub topics: Vec<ProduceTopicResult>,
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
}

impl<'a> Message<'a> for ProduceResponse {
    const API_KEY: ApiKey = ApiKey::Produce;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = ProducePartitionResult {
                    index: r.i32()?,
                    error_code: r.i16()?,
                    base_offset: r.i64()?,
                    ..Default::default()
                };
                if version >= 2 {
                    p.log_append_time_ms = r.i64()?;
                }
                if version >= 5 {
                    p.log_start_offset = r.i64()?;
                }
                if version >= 8 {
                    p.record_errors = r.array_of(f, |r| {
                        let e = BatchIndexError {
                            batch_index: r.i32()?,
                            batch_index_error_message: r.nullable_string(f)?,
                        };
                        end(r, f)?;
                        Ok(e)
                    })?;
                    p.error_message = r.nullable_string(f)?;
                }
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(ProduceTopicResult { name, partitions })
        })?;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        end(r, f)?;
        Ok(ProduceResponse {
            topics,
            throttle_time_ms,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.index);
                w.put_i16(p.error_code);
                w.put_i64(p.base_offset);
                if version >= 2 {
                    w.put_i64(p.log_append_time_ms);
                }
                if version >= 5 {
                    w.put_i64(p.log_start_offset);
                }
                if version >= 8 {
                    w.put_array(f, &p.record_errors, |w, e| {
                        w.put_i32(e.batch_index);
                        w.put_nullable_str(f, e.batch_index_error_message.as_deref())?;
                        end_struct(w, f);
                        Ok(())
                    })?;
                    w.put_nullable_str(f, p.error_message.as_deref())?;
                }
                end_struct(w, f);
                Ok(())
            })?;
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        end_struct(w, f);
        Ok(())
    }
}
