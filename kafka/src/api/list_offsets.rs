//! ListOffsets (key 2), v1-v7; flexible from v6. (v0 answers with an array
//! of old-style offsets; nothing current sends it, and Kafka 4 dropped it.)

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// Timestamp -1: the latest offset (the end of the partition).
pub const LATEST_TIMESTAMP: i64 = -1;
/// Timestamp -2: the earliest offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// Timestamp -3: the offset of the record with the largest timestamp (v7+).
pub const MAX_TIMESTAMP: i64 = -3;

/// One partition to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOffsetsPartition {
    /// The partition.
    pub partition_index: i32,
    /// The consumer's leader epoch (v4+; -1 unknown).
    pub current_leader_epoch: i32,
    /// The timestamp to look up, or one of the special timestamps above.
    pub timestamp: i64,
}

impl Default for ListOffsetsPartition {
    fn default() -> Self {
        ListOffsetsPartition {
            partition_index: 0,
            current_leader_epoch: -1,
            timestamp: LATEST_TIMESTAMP,
        }
    }
}

/// One topic to look up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsTopic {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<ListOffsetsPartition>,
}

/// ListOffsets request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    /// The follower's id; -1 for consumers.
    pub replica_id: i32,
    /// 0 read uncommitted, 1 read committed (v2+).
    pub isolation_level: i8,
    /// The partitions.
    pub topics: Vec<ListOffsetsTopic>,
}

impl Default for ListOffsetsRequest {
    fn default() -> Self {
        ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 0,
            topics: Vec::new(),
        }
    }
}

impl<'a> Message<'a> for ListOffsetsRequest {
    const API_KEY: ApiKey = ApiKey::ListOffsets;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let replica_id = r.i32()?;
        let isolation_level = if version >= 2 { r.i8()? } else { 0 };
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = ListOffsetsPartition {
                    partition_index: r.i32()?,
                    ..Default::default()
                };
                if version >= 4 {
                    p.current_leader_epoch = r.i32()?;
                }
                p.timestamp = r.i64()?;
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(ListOffsetsTopic { name, partitions })
        })?;
        end(r, f)?;
        Ok(ListOffsetsRequest {
            replica_id,
            isolation_level,
            topics,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_i32(self.replica_id);
        if version >= 2 {
            w.put_i8(self.isolation_level);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.partition_index);
                if version >= 4 {
                    w.put_i32(p.current_leader_epoch);
                }
                w.put_i64(p.timestamp);
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

/// One partition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListOffsetsPartitionResult {
    /// The partition.
    pub partition_index: i32,
    /// The error.
    pub error_code: i16,
    /// The timestamp of the found record (-1 for the special lookups).
    pub timestamp: i64,
    /// The found offset.
    pub offset: i64,
    /// Its leader epoch (v4+; -1 unknown).
    pub leader_epoch: i32,
}

impl Default for ListOffsetsPartitionResult {
    fn default() -> Self {
        ListOffsetsPartitionResult {
            partition_index: 0,
            error_code: 0,
            timestamp: -1,
            offset: -1,
            leader_epoch: -1,
        }
    }
}

/// One topic's answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsTopicResult {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<ListOffsetsPartitionResult>,
}

/// ListOffsets response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsResponse {
    /// Throttle time (v2+).
    pub throttle_time_ms: i32,
    /// Answers per topic.
    pub topics: Vec<ListOffsetsTopicResult>,
}

impl<'a> Message<'a> for ListOffsetsResponse {
    const API_KEY: ApiKey = ApiKey::ListOffsets;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 2 { r.i32()? } else { 0 };
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = ListOffsetsPartitionResult {
                    partition_index: r.i32()?,
                    error_code: r.i16()?,
                    timestamp: r.i64()?,
                    offset: r.i64()?,
                    ..Default::default()
                };
                if version >= 4 {
                    p.leader_epoch = r.i32()?;
                }
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(ListOffsetsTopicResult { name, partitions })
        })?;
        end(r, f)?;
        Ok(ListOffsetsResponse {
            throttle_time_ms,
            topics,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 2 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.partition_index);
                w.put_i16(p.error_code);
                w.put_i64(p.timestamp);
                w.put_i64(p.offset);
                if version >= 4 {
                    w.put_i32(p.leader_epoch);
                }
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
