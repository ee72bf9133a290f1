//! CreateTopics (key 19), v0-v7; flexible from v5. The response's
//! `topic_config_error_code` is a tagged field (tag 0, v5+): written only
//! when it is not 0, read when present.

use crate::api::{end, read_i32s, write_i32s};
use crate::api_key::ApiKey;
use crate::decoder::{Decoder, Uuid};
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// The tag of `topic_config_error_code` in the response.
const TAG_TOPIC_CONFIG_ERROR_CODE: u32 = 0;

/// A manual replica assignment for one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableReplicaAssignment {
    /// The partition.
    pub partition_index: i32,
    /// Its replicas' node ids.
    pub broker_ids: Vec<i32>,
}

/// A config key and value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopicConfig {
    /// The key.
    pub name: String,
    /// The value.
    pub value: Option<String>,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopic {
    /// The topic.
    pub name: String,
    /// Partitions (-1 for the broker default).
    pub num_partitions: i32,
    /// Replication factor (-1 for the broker default).
    pub replication_factor: i16,
    /// Manual assignments (empty for automatic).
    pub assignments: Vec<CreatableReplicaAssignment>,
    /// Configs.
    pub configs: Vec<CreatableTopicConfig>,
}

/// CreateTopics request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTopicsRequest {
    /// The topics.
    pub topics: Vec<CreatableTopic>,
    /// How long to wait for creation.
    pub timeout_ms: i32,
    /// Only validate (v1+).
    pub validate_only: bool,
}

impl Default for CreateTopicsRequest {
    fn default() -> Self {
        CreateTopicsRequest {
            topics: Vec::new(),
            timeout_ms: 60_000,
            validate_only: false,
        }
    }
}

impl<'a> Message<'a> for CreateTopicsRequest {
    const API_KEY: ApiKey = ApiKey::CreateTopics;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let topics = r.array_of(f, |r| {
            let name = r.string(f)?;
            let num_partitions = r.i32()?;
            let replication_factor = r.i16()?;
            let assignments = r.array_of(f, |r| {
                let a = CreatableReplicaAssignment {
                    partition_index: r.i32()?,
                    broker_ids: read_i32s(r, f)?,
                };
                end(r, f)?;
                Ok(a)
            })?;
            let configs = r.array_of(f, |r| {
                let c = CreatableTopicConfig {
                    name: r.string(f)?,
                    value: r.nullable_string(f)?,
                };
                end(r, f)?;
                Ok(c)
            })?;
            end(r, f)?;
            Ok(CreatableTopic {
                name,
                num_partitions,
                replication_factor,
                assignments,
                configs,
            })
        })?;
        let timeout_ms = r.i32()?;
        let validate_only = if version >= 1 { r.bool()? } else { false };
        end(r, f)?;
        Ok(CreateTopicsRequest {
            topics,
            timeout_ms,
            validate_only,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_array(f, &self.topics, |w, t| {
            w.put_str(f, &t.name)?;
            w.put_i32(t.num_partitions);
            w.put_i16(t.replication_factor);
            w.put_array(f, &t.assignments, |w, a| {
                w.put_i32(a.partition_index);
                write_i32s(w, f, &a.broker_ids)?;
                end_struct(w, f);
                Ok(())
            })?;
            w.put_array(f, &t.configs, |w, c| {
                w.put_str(f, &c.name)?;
                w.put_nullable_str(f, c.value.as_deref())?;
                end_struct(w, f);
                Ok(())
            })?;
            end_struct(w, f);
            Ok(())
        })?;
        w.put_i32(self.timeout_ms);
        if version >= 1 {
            w.put_bool(self.validate_only);
        }
        end_struct(w, f);
        Ok(())
    }
}

/// A config of a created topic (v5+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopicConfigs {
    /// The key.
    pub name: String,
    /// The value.
    pub value: Option<String>,
    /// Whether it is read-only.
    pub read_only: bool,
    /// Where the value comes from (-1 unknown).
    pub config_source: i8,
    /// Whether it is sensitive.
    pub is_sensitive: bool,
}

/// One topic's creation result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatableTopicResult {
    /// The topic.
    pub name: String,
    /// Its id (v7+).
    pub topic_id: Uuid,
    /// The error.
    pub error_code: i16,
    /// The error message (v1+).
    pub error_message: Option<String>,
    /// Why its configs could not be described (v5+, tagged; 0 none).
    pub topic_config_error_code: i16,
    /// Partitions (v5+; -1 unknown).
    pub num_partitions: i32,
    /// Replication factor (v5+; -1 unknown).
    pub replication_factor: i16,
    /// Configs (v5+; `None` when null).
    pub configs: Option<Vec<CreatableTopicConfigs>>,
}

impl Default for CreatableTopicResult {
    fn default() -> Self {
        CreatableTopicResult {
            name: String::new(),
            topic_id: Uuid::ZERO,
            error_code: 0,
            error_message: None,
            topic_config_error_code: 0,
            num_partitions: -1,
            replication_factor: -1,
            configs: None,
        }
    }
}

/// CreateTopics response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicsResponse {
    /// Throttle time (v2+).
    pub throttle_time_ms: i32,
    /// Results per topic.
    pub topics: Vec<CreatableTopicResult>,
}

impl<'a> Message<'a> for CreateTopicsResponse {
    const API_KEY: ApiKey = ApiKey::CreateTopics;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 2 { r.i32()? } else { 0 };
        let topics = r.array_of(f, |r| {
            let mut t = CreatableTopicResult {
                name: r.string(f)?,
                ..Default::default()
            };
            if version >= 7 {
                t.topic_id = r.uuid()?;
            }
            t.error_code = r.i16()?;
            if version >= 1 {
                t.error_message = r.nullable_string(f)?;
            }
            if version >= 5 {
                t.num_partitions = r.i32()?;
                t.replication_factor = r.i16()?;
                t.configs = r.nullable_array(f, |r| {
                    let c = CreatableTopicConfigs {
                        name: r.string(f)?,
                        value: r.nullable_string(f)?,
                        read_only: r.bool()?,
                        config_source: r.i8()?,
                        is_sensitive: r.bool()?,
                    };
                    end(r, f)?;
                    Ok(c)
                })?;
            }
            if f {
                let mut code = 0;
                r.tagged_fields(|tag, field| {
                    if tag == TAG_TOPIC_CONFIG_ERROR_CODE {
                        code = field.i16()?;
                        Ok(true)
                    } else {
                        Ok(false)
                    }
                })?;
                t.topic_config_error_code = code;
            }
            Ok(t)
        })?;
        end(r, f)?;
        Ok(CreateTopicsResponse {
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
            if version >= 7 {
                w.put_uuid(t.topic_id);
            }
            w.put_i16(t.error_code);
            if version >= 1 {
                w.put_nullable_str(f, t.error_message.as_deref())?;
            }
            if version >= 5 {
                w.put_i32(t.num_partitions);
                w.put_i16(t.replication_factor);
                w.put_nullable_array(f, t.configs.as_deref(), |w, c| {
                    w.put_str(f, &c.name)?;
                    w.put_nullable_str(f, c.value.as_deref())?;
                    w.put_bool(c.read_only);
                    w.put_i8(c.config_source);
                    w.put_bool(c.is_sensitive);
                    end_struct(w, f);
                    Ok(())
                })?;
            }
            if f {
                // A tagged field is written only when it differs from its
                // default (0 here), as Kafka does.
                let code = t.topic_config_error_code.to_be_bytes();
                if t.topic_config_error_code != 0 {
                    w.put_tagged_fields(&[(TAG_TOPIC_CONFIG_ERROR_CODE, &code)])?;
                } else {
                    w.put_empty_tagged_fields();
                }
            }
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}
