//! DeleteTopics (key 20), v0-v6; flexible from v4. v0-v5 name topics in a
//! string array; v6 sends (name, id) pairs.

use crate::api::{end, read_strings};
use crate::api_key::ApiKey;
use crate::decoder::{Decoder, Uuid};
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// A topic to delete. Before v6 only `name` is sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteTopicState {
    /// The name (nullable in v6, when deleting by id).
    pub name: Option<String>,
    /// The id (v6+; zero when deleting by name).
    pub topic_id: Uuid,
}

/// DeleteTopics request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteTopicsRequest {
    /// The topics.
    pub topics: Vec<DeleteTopicState>,
    /// How long to wait for deletion.
    pub timeout_ms: i32,
}

impl<'a> Message<'a> for DeleteTopicsRequest {
    const API_KEY: ApiKey = ApiKey::DeleteTopics;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let topics = if version >= 6 {
            r.array_of(f, |r| {
                let t = DeleteTopicState {
                    name: r.nullable_string(f)?,
                    topic_id: r.uuid()?,
                };
                end(r, f)?;
                Ok(t)
            })?
        } else {
            read_strings(r, f)?
                .into_iter()
                .map(|name| DeleteTopicState {
                    name: Some(name),
                    topic_id: Uuid::ZERO,
                })
                .collect()
        };
        let timeout_ms = r.i32()?;
        end(r, f)?;
        Ok(DeleteTopicsRequest { topics, timeout_ms })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 6 {
            w.put_array(f, &self.topics, |w, t| {
                w.put_nullable_str(f, t.name.as_deref())?;
                w.put_uuid(t.topic_id);
                end_struct(w, f);
                Ok(())
            })?;
        } else {
            w.put_array(f, &self.topics, |w, t| {
                w.put_str(f, t.name.as_deref().unwrap_or(""))
            })?;
        }
        w.put_i32(self.timeout_ms);
        end_struct(w, f);
        Ok(())
    }
}

/// One topic's deletion result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeletableTopicResult {
    /// The name (nullable from v6).
    pub name: Option<String>,
    /// The id (v6+).
    pub topic_id: Uuid,
    /// The error.
    pub error_code: i16,
    /// The error message (v5+).
    pub error_message: Option<String>,
}

/// DeleteTopics response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteTopicsResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// Results per topic.
    pub responses: Vec<DeletableTopicResult>,
}

impl<'a> Message<'a> for DeleteTopicsResponse {
    const API_KEY: ApiKey = ApiKey::DeleteTopics;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let responses = r.array_of(f, |r| {
            let mut t = DeletableTopicResult {
                name: if version >= 6 {
                    r.nullable_string(f)?
                } else {
                    Some(r.string(f)?)
                },
                ..Default::default()
            };
            if version >= 6 {
                t.topic_id = r.uuid()?;
            }
            t.error_code = r.i16()?;
            if version >= 5 {
                t.error_message = r.nullable_string(f)?;
            }
            end(r, f)?;
            Ok(t)
        })?;
        end(r, f)?;
        Ok(DeleteTopicsResponse {
            throttle_time_ms,
            responses,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_array(f, &self.responses, |w, t| {
            if version >= 6 {
                w.put_nullable_str(f, t.name.as_deref())?;
                w.put_uuid(t.topic_id);
            } else {
                w.put_str(f, t.name.as_deref().unwrap_or(""))?;
            }
            w.put_i16(t.error_code);
            if version >= 5 {
                w.put_nullable_str(f, t.error_message.as_deref())?;
            }
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}
