//! Fetch (key 1), v4-v12; flexible from v12. v0-v3 carry legacy message
//! sets and are not supported; v13+ name topics by id and are not
//! supported either. Record bytes in the response are borrowed.
//!
//! The v12 tagged fields (request: cluster id; response: diverging epoch,
//! current leader, snapshot id) are skipped when decoding and never
//! written: kelp has no leader epochs to diverge, and absent means default.

use crate::api::{end, read_i32s, write_i32s};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// One partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    /// The partition.
    pub partition: i32,
    /// The consumer's leader epoch (v9+; -1 unknown).
    pub current_leader_epoch: i32,
    /// The first offset wanted.
    pub fetch_offset: i64,
    /// The epoch of the last fetched record (v12+; -1 unknown).
    pub last_fetched_epoch: i32,
    /// The follower's log start offset (v5+; -1 for consumers).
    pub log_start_offset: i64,
    /// The most bytes to return for this partition.
    pub partition_max_bytes: i32,
}

impl Default for FetchPartition {
    fn default() -> Self {
        FetchPartition {
            partition: 0,
            current_leader_epoch: -1,
            fetch_offset: 0,
            last_fetched_epoch: -1,
            log_start_offset: -1,
            partition_max_bytes: 0,
        }
    }
}

/// One topic to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopic {
    /// The topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<FetchPartition>,
}

/// Partitions to drop from an incremental fetch session (v7+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForgottenTopic {
    /// The topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<i32>,
}

/// Fetch request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The follower's id; -1 for consumers.
    pub replica_id: i32,
    /// The longest time to wait for `min_bytes`.
    pub max_wait_ms: i32,
    /// The fewest bytes worth answering with.
    pub min_bytes: i32,
    /// The most bytes to return in total.
    pub max_bytes: i32,
    /// 0 read uncommitted, 1 read committed.
    pub isolation_level: i8,
    /// The fetch session (v7+; 0 for none).
    pub session_id: i32,
    /// The fetch session epoch (v7+; -1 for a full fetch without a session).
    pub session_epoch: i32,
    /// The partitions to fetch.
    pub topics: Vec<FetchTopic>,
    /// Partitions to drop from the session (v7+).
    pub forgotten_topics_data: Vec<ForgottenTopic>,
    /// The consumer's rack (v11+).
    pub rack_id: String,
}

impl Default for FetchRequest {
    fn default() -> Self {
        FetchRequest {
            replica_id: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: i32::MAX,
            isolation_level: 0,
            session_id: 0,
            session_epoch: -1,
            topics: Vec::new(),
            forgotten_topics_data: Vec::new(),
            rack_id: String::new(),
        }
    }
}

impl<'a> Message<'a> for FetchRequest {
    const API_KEY: ApiKey = ApiKey::Fetch;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = FetchRequest {
            replica_id: r.i32()?,
            max_wait_ms: r.i32()?,
            min_bytes: r.i32()?,
            ..Default::default()
        };
        if version >= 3 {
            out.max_bytes = r.i32()?;
        }
        if version >= 4 {
            out.isolation_level = r.i8()?;
        }
        if version >= 7 {
            out.session_id = r.i32()?;
            out.session_epoch = r.i32()?;
        }
        out.topics = r.array_of(f, |r| {
            let topic = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = FetchPartition {
                    partition: r.i32()?,
                    ..Default::default()
                };
                if version >= 9 {
                    p.current_leader_epoch = r.i32()?;
                }
                p.fetch_offset = r.i64()?;
                if version >= 12 {
                    p.last_fetched_epoch = r.i32()?;
                }
                if version >= 5 {
                    p.log_start_offset = r.i64()?;
                }
                p.partition_max_bytes = r.i32()?;
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(FetchTopic { topic, partitions })
        })?;
        if version >= 7 {
            out.forgotten_topics_data = r.array_of(f, |r| {
                let t = ForgottenTopic {
                    topic: r.string(f)?,
                    partitions: read_i32s(r, f)?,
                };
                end(r, f)?;
                Ok(t)
            })?;
        }
        if version >= 11 {
            out.rack_id = r.string(f)?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_i32(self.replica_id);
        w.put_i32(self.max_wait_ms);
        w.put_i32(self.min_bytes);
        if version >= 3 {
            w.put_i32(self.max_bytes);
        }
        if version >= 4 {
            w.put_i8(self.isolation_level);
        }
        if version >= 7 {
            w.put_i32(self.session_id);
            w.put_i32(self.session_epoch);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.topic)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.partition);
                if version >= 9 {
                    w.put_i32(p.current_leader_epoch);
                }
                w.put_i64(p.fetch_offset);
                if version >= 12 {
                    w.put_i32(p.last_fetched_epoch);
                }
                if version >= 5 {
                    w.put_i64(p.log_start_offset);
                }
                w.put_i32(p.partition_max_bytes);
                end_struct(w, f);
                Ok(())
            })?;
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 7 {
            w.put_array(f, &self.forgotten_topics_data, |w, t| {
                w.put_str(f, &t.topic)?;
                write_i32s(w, f, &t.partitions)?;
                end_struct(w, f);
                Ok(())
            })?;
        }
        if version >= 11 {
            w.put_str(f, &self.rack_id)?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// An aborted transaction in a fetched range (v4+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AbortedTransaction {
    /// The producer.
    pub producer_id: i64,
    /// The first offset of the aborted transaction.
    pub first_offset: i64,
}

/// One partition's fetched data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionData<'a> {
    /// The partition.
    pub partition_index: i32,
    /// The error.
    pub error_code: i16,
    /// The high watermark.
    pub high_watermark: i64,
    /// The last stable offset (v4+; -1 unknown).
    pub last_stable_offset: i64,
    /// The log start offset (v5+; -1 unknown).
    pub log_start_offset: i64,
    /// Aborted transactions (v4+; `None` when null).
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    /// The replica to fetch from instead (v11+; -1 none).
    pub preferred_read_replica: i32,
    /// Record batches, borrowed; `None` when null.
    pub records: Option<&'a [u8]>,
}

impl Default for FetchPartitionData<'_> {
    fn default() -> Self {
        FetchPartitionData {
            partition_index: 0,
            error_code: 0,
            high_watermark: 0,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted_transactions: None,
            preferred_read_replica: -1,
            records: None,
        }
    }
}

/// One topic's fetched data.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopicData<'a> {
    /// The topic.
    pub topic: String,
    /// Its partitions.
    pub partitions: Vec<FetchPartitionData<'a>>,
}

/// Fetch response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchResponse<'a> {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// The top-level error (v7+).
    pub error_code: i16,
    /// The fetch session (v7+).
    pub session_id: i32,
    /// The data per topic.
    pub topics: Vec<FetchTopicData<'a>>,
}

impl<'a> Message<'a> for FetchResponse<'a> {
    const API_KEY: ApiKey = ApiKey::Fetch;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = FetchResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32()?;
        }
        if version >= 7 {
            out.error_code = r.i16()?;
            out.session_id = r.i32()?;
        }
        out.topics = r.array_of(f, |r| {
            let topic = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = FetchPartitionData {
                    partition_index: r.i32()?,
                    error_code: r.i16()?,
                    high_watermark: r.i64()?,
                    ..Default::default()
                };
                if version >= 4 {
                    p.last_stable_offset = r.i64()?;
                }
                if version >= 5 {
                    p.log_start_offset = r.i64()?;
                }
                if version >= 4 {
                    p.aborted_transactions = r.nullable_array(f, |r| {
                        let a = AbortedTransaction {
                            producer_id: r.i64()?,
                            first_offset: r.i64()?,
                        };
                        end(r, f)?;
                        Ok(a)
                    })?;
                }
                if version >= 11 {
                    p.preferred_read_replica = r.i32()?;
                }
                p.records = r.nullable_bytes(f)?;
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(FetchTopicData { topic, partitions })
        })?;
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        if version >= 7 {
            w.put_i16(self.error_code);
            w.put_i32(self.session_id);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.topic)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.partition_index);
                w.put_i16(p.error_code);
                w.put_i64(p.high_watermark);
                if version >= 4 {
                    w.put_i64(p.last_stable_offset);
                }
                if version >= 5 {
                    w.put_i64(p.log_start_offset);
                }
                if version >= 4 {
                    w.put_nullable_array(f, p.aborted_transactions.as_deref(), |w, a| {
                        w.put_i64(a.producer_id);
                        w.put_i64(a.first_offset);
                        end_struct(w, f);
                        Ok(())
                    })?;
                }
                if version >= 11 {
                    w.put_i32(p.preferred_read_replica);
                }
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
