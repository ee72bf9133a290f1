//! OffsetFetch (key 9), v0-v7; flexible from v6. (v8+ batch several
//! groups per request; not supported.)

use crate::api::{end, read_i32s, write_i32s};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// One topic whose offsets are asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopic {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partition_indexes: Vec<i32>,
}

/// OffsetFetch request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchRequest {
    /// The group.
    pub group_id: String,
    /// The topics; `None` (v2+) asks for every committed offset of the group.
    pub topics: Option<Vec<OffsetFetchTopic>>,
    /// Whether to wait for pending transactional commits (v7+).
    pub require_stable: bool,
}

impl<'a> Message<'a> for OffsetFetchRequest {
    const API_KEY: ApiKey = ApiKey::OffsetFetch;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let group_id = r.string(f)?;
        let topic = |r: &mut Decoder<'a>| {
            let t = OffsetFetchTopic {
                name: r.string(f)?,
                partition_indexes: read_i32s(r, f)?,
            };
            end(r, f)?;
            Ok(t)
        };
        let topics = if version >= 2 {
            r.nullable_array(f, topic)?
        } else {
            Some(r.array_of(f, topic)?)
        };
        let require_stable = if version >= 7 { r.bool()? } else { false };
        end(r, f)?;
        Ok(OffsetFetchRequest {
            group_id,
            topics,
            require_stable,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_str(f, &self.group_id)?;
        let topics = match (&self.topics, version >= 2) {
            (Some(t), _) => Some(t.as_slice()),
            (None, true) => None,
            (None, false) => Some(&[][..]),
        };
        w.put_nullable_array(f, topics, |w, t| {
            w.put_str(f, &t.name)?;
            write_i32s(w, f, &t.partition_indexes)?;
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 7 {
            w.put_bool(self.require_stable);
        }
        end_struct(w, f);
        Ok(())
    }
}

/// One partition's committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetFetchPartition {
    /// The partition.
    pub partition_index: i32,
    /// The committed offset (-1 for none).
    pub committed_offset: i64,
    /// Its leader epoch (v5+; -1 unknown).
    pub committed_leader_epoch: i32,
    /// The metadata committed with it.
    pub metadata: Option<String>,
    /// The error.
    pub error_code: i16,
}

impl Default for OffsetFetchPartition {
    fn default() -> Self {
        OffsetFetchPartition {
            partition_index: 0,
            committed_offset: -1,
            committed_leader_epoch: -1,
            metadata: None,
            error_code: 0,
        }
    }
}

/// One topic's committed offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopicResult {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<OffsetFetchPartition>,
}

/// OffsetFetch response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchResponse {
    /// Throttle time (v3+).
    pub throttle_time_ms: i32,
    /// Offsets per topic.
    pub topics: Vec<OffsetFetchTopicResult>,
    /// The top-level error (v2+).
    pub error_code: i16,
}

impl<'a> Message<'a> for OffsetFetchResponse {
    const API_KEY: ApiKey = ApiKey::OffsetFetch;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 3 { r.i32()? } else { 0 };
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = OffsetFetchPartition {
                    partition_index: r.i32()?,
                    committed_offset: r.i64()?,
                    ..Default::default()
                };
                if version >= 5 {
                    p.committed_leader_epoch = r.i32()?;
                }
                p.metadata = r.nullable_string(f)?;
                p.error_code = r.i16()?;
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(OffsetFetchTopicResult { name, partitions })
        })?;
        let error_code = if version >= 2 { r.i16()? } else { 0 };
        end(r, f)?;
        Ok(OffsetFetchResponse {
            throttle_time_ms,
            topics,
            error_code,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 3 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.partition_index);
                w.put_i64(p.committed_offset);
                if version >= 5 {
                    w.put_i32(p.committed_leader_epoch);
                }
                w.put_nullable_str(f, p.metadata.as_deref())?;
                w.put_i16(p.error_code);
                end_struct(w, f);
                Ok(())
            })?;
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 2 {
            w.put_i16(self.error_code);
        }
        end_struct(w, f);
        Ok(())
    }
}
