//! FindCoordinator (key 10), v0-v4; flexible from v3. v0-v3 ask for one
//! key; v4 asks for several and answers each.

use crate::api::{end, read_strings, write_strings};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// Key type 0: a consumer group.
pub const KEY_TYPE_GROUP: i8 = 0;
/// Key type 1: a transactional id.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// FindCoordinator request. For v0-v3, `coordinator_keys` holds the one key
/// (decoding fills it, encoding reads its first entry).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FindCoordinatorRequest {
    /// The key type (v1+; 0 group, 1 transaction).
    pub key_type: i8,
    /// The keys (group ids or transactional ids).
    pub coordinator_keys: Vec<String>,
}

impl<'a> Message<'a> for FindCoordinatorRequest {
    const API_KEY: ApiKey = ApiKey::FindCoordinator;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = FindCoordinatorRequest::default();
        if version <= 3 {
            out.coordinator_keys = vec![r.string(f)?];
        }
        if version >= 1 {
            out.key_type = r.i8()?;
        }
        if version >= 4 {
            out.coordinator_keys = read_strings(r, f)?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version <= 3 {
            w.put_str(f, self.coordinator_keys.first().map_or("", String::as_str))?;
        }
        if version >= 1 {
            w.put_i8(self.key_type);
        }
        if version >= 4 {
            write_strings(w, f, &self.coordinator_keys)?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// The coordinator of one key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Coordinator {
    /// The key (v4+).
    pub key: String,
    /// The coordinator's node id.
    pub node_id: i32,
    /// Its host.
    pub host: String,
    /// Its port.
    pub port: i32,
    /// The error.
    pub error_code: i16,
    /// The error message (v1+).
    pub error_message: Option<String>,
}

/// FindCoordinator response. For v0-v3 the one answer is the first entry of
/// `coordinators` (its `key` is not sent).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FindCoordinatorResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// One entry per key.
    pub coordinators: Vec<Coordinator>,
}

impl<'a> Message<'a> for FindCoordinatorResponse {
    const API_KEY: ApiKey = ApiKey::FindCoordinator;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = FindCoordinatorResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32()?;
        }
        if version <= 3 {
            let mut c = Coordinator {
                error_code: r.i16()?,
                ..Default::default()
            };
            if version >= 1 {
                c.error_message = r.nullable_string(f)?;
            }
            c.node_id = r.i32()?;
            c.host = r.string(f)?;
            c.port = r.i32()?;
            out.coordinators = vec![c];
        } else {
            out.coordinators = r.array_of(f, |r| {
                let c = Coordinator {
                    key: r.string(f)?,
                    node_id: r.i32()?,
                    host: r.string(f)?,
                    port: r.i32()?,
                    error_code: r.i16()?,
                    error_message: r.nullable_string(f)?,
                };
                end(r, f)?;
                Ok(c)
            })?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        if version <= 3 {
            let none = Coordinator::default();
            let c = self.coordinators.first().unwrap_or(&none);
            w.put_i16(c.error_code);
            if version >= 1 {
                w.put_nullable_str(f, c.error_message.as_deref())?;
            }
            w.put_i32(c.node_id);
            w.put_str(f, &c.host)?;
            w.put_i32(c.port);
        } else {
            w.put_array(f, &self.coordinators, |w, c| {
                w.put_str(f, &c.key)?;
                w.put_i32(c.node_id);
                w.put_str(f, &c.host)?;
                w.put_i32(c.port);
                w.put_i16(c.error_code);
                w.put_nullable_str(f, c.error_message.as_deref())?;
                end_struct(w, f);
                Ok(())
            })?;
        }
        end_struct(w, f);
        Ok(())
    }
}
