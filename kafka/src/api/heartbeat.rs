//! Heartbeat (key 12), v0-v4; flexible from v4.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// Heartbeat request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatRequest {
    /// The group.
    pub group_id: String,
    /// The member's generation.
    pub generation_id: i32,
    /// The member id.
    pub member_id: String,
    /// Static membership id (v3+).
    pub group_instance_id: Option<String>,
}

impl<'a> Message<'a> for HeartbeatRequest {
    const API_KEY: ApiKey = ApiKey::Heartbeat;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let group_id = r.string(f)?;
        let generation_id = r.i32()?;
        let member_id = r.string(f)?;
        let group_instance_id = if version >= 3 {
            r.nullable_string(f)?
        } else {
            None
        };
        end(r, f)?;
        Ok(HeartbeatRequest {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_str(f, &self.group_id)?;
        w.put_i32(self.generation_id);
        w.put_str(f, &self.member_id)?;
        if version >= 3 {
            w.put_nullable_str(f, self.group_instance_id.as_deref())?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// Heartbeat response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeartbeatResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// The error.
    pub error_code: i16,
}

impl<'a> Message<'a> for HeartbeatResponse {
    const API_KEY: ApiKey = ApiKey::Heartbeat;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        end(r, f)?;
        Ok(HeartbeatResponse {
            throttle_time_ms,
            error_code,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_i16(self.error_code);
        end_struct(w, f);
        Ok(())
    }
}
