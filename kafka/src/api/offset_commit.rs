//! OffsetCommit (key 8), v0-v8; flexible from v8.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// One partition's offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitPartition {
    /// The partition.
    pub partition_index: i32,
    /// The offset of the next record to consume.
    pub committed_offset: i64,
    /// The leader epoch of the last consumed record (v6+; -1 unknown).
    pub committed_leader_epoch: i32,
    /// The commit time (v1 only; -1 for now).
    pub commit_timestamp: i64,
    /// Opaque client metadata.
    pub committed_metadata: Option<String>,
}

impl Default for OffsetCommitPartition {
    fn default() -> Self {
        OffsetCommitPartition {
            partition_index: 0,
            committed_offset: 0,
            committed_leader_epoch: -1,
            commit_timestamp: -1,
            committed_metadata: None,
        }
    }
}

/// One topic's offsets to commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopic {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<OffsetCommitPartition>,
}

/// OffsetCommit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitRequest {
    /// The group.
    pub group_id: String,
    /// The member's generation (v1+; -1 for a commit outside a group).
    pub generation_id: i32,
    /// The member id (v1+).
    pub member_id: String,
    /// Static membership id (v7+).
    pub group_instance_id: Option<String>,
    /// Retention of the commit (v2-v4; -1 for the broker's default).
    pub retention_time_ms: i64,
    /// The offsets.
    pub topics: Vec<OffsetCommitTopic>,
}

impl Default for OffsetCommitRequest {
    fn default() -> Self {
        OffsetCommitRequest {
            group_id: String::new(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            retention_time_ms: -1,
            topics: Vec::new(),
        }
    }
}

impl<'a> Message<'a> for OffsetCommitRequest {
    const API_KEY: ApiKey = ApiKey::OffsetCommit;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = OffsetCommitRequest {
            group_id: r.string(f)?,
            ..Default::default()
        };
        if version >= 1 {
            out.generation_id = r.i32()?;
            out.member_id = r.string(f)?;
        }
        if version >= 7 {
            out.group_instance_id = r.nullable_string(f)?;
        }
        if (2..=4).contains(&version) {
            out.retention_time_ms = r.i64()?;
        }
        out.topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let mut p = OffsetCommitPartition {
                    partition_index: r.i32()?,
                    committed_offset: r.i64()?,
                    ..Default::default()
                };
                if version >= 6 {
                    p.committed_leader_epoch = r.i32()?;
                }
                if version == 1 {
                    p.commit_timestamp = r.i64()?;
                }
                p.committed_metadata = r.nullable_string(f)?;
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(OffsetCommitTopic { name, partitions })
        })?;
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_str(f, &self.group_id)?;
        if version >= 1 {
            w.put_i32(self.generation_id);
            w.put_str(f, &self.member_id)?;
        }
        if version >= 7 {
            w.put_nullable_str(f, self.group_instance_id.as_deref())?;
        }
        if (2..=4).contains(&version) {
            w.put_i64(self.retention_time_ms);
        }
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_array(f, &t.partitions, |w, p| {
                w.put_i32(p.partition_index);
                w.put_i64(p.committed_offset);
                if version >= 6 {
                    w.put_i32(p.committed_leader_epoch);
                }
                if version == 1 {
                    w.put_i64(p.commit_timestamp);
                }
                w.put_nullable_str(f, p.committed_metadata.as_deref())?;
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

/// One partition's commit result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetCommitPartitionResult {
    /// The partition.
    pub partition_index: i32,
    /// The error.
    pub error_code: i16,
}

/// One topic's commit results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopicResult {
    /// The topic.
    pub name: String,
    /// Its partitions.
    pub partitions: Vec<OffsetCommitPartitionResult>,
}

/// OffsetCommit response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitResponse {
    /// Throttle time (v3+).
    pub throttle_time_ms: i32,
    /// Results per topic.
    pub topics: Vec<OffsetCommitTopicResult>,
}

impl<'a> Message<'a> for OffsetCommitResponse {
    const API_KEY: ApiKey = ApiKey::OffsetCommit;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 3 { r.i32()? } else { 0 };
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let partitions = r.array_of(f, |r| {
                let p = OffsetCommitPartitionResult {
                    partition_index: r.i32()?,
                    error_code: r.i16()?,
                };
                end(r, f)?;
                Ok(p)
            })?;
            end(r, f)?;
            Ok(OffsetCommitTopicResult { name, partitions })
        })?;
        end(r, f)?;
        Ok(OffsetCommitResponse {
            throttle_time_ms,
            topics,
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
                w.put_i16(p.error_code);
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
