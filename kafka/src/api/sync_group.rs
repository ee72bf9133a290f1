//! SyncGroup (key 14), v0-v5; flexible from v4.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// One member's assignment, sent by the leader.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupAssignment {
    /// The member.
    pub member_id: String,
    /// Opaque assignment bytes.
    pub assignment: Vec<u8>,
}

/// SyncGroup request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupRequest {
    /// The group.
    pub group_id: String,
    /// The member's generation.
    pub generation_id: i32,
    /// The member id.
    pub member_id: String,
    /// Static membership id (v3+).
    pub group_instance_id: Option<String>,
    /// The protocol type (v5+).
    pub protocol_type: Option<String>,
    /// The protocol name (v5+).
    pub protocol_name: Option<String>,
    /// Assignments (from the leader only; empty from followers).
    pub assignments: Vec<SyncGroupAssignment>,
}

impl<'a> Message<'a> for SyncGroupRequest {
    const API_KEY: ApiKey = ApiKey::SyncGroup;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = SyncGroupRequest {
            group_id: r.string(f)?,
            generation_id: r.i32()?,
            member_id: r.string(f)?,
            ..Default::default()
        };
        if version >= 3 {
            out.group_instance_id = r.nullable_string(f)?;
        }
        if version >= 5 {
            out.protocol_type = r.nullable_string(f)?;
            out.protocol_name = r.nullable_string(f)?;
        }
        out.assignments = r.array_of(f, |r| {
            let a = SyncGroupAssignment {
                member_id: r.string(f)?,
                assignment: r.bytes(f)?.to_vec(),
            };
            end(r, f)?;
            Ok(a)
        })?;
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_str(f, &self.group_id)?;
        w.put_i32(self.generation_id);
        w.put_str(f, &self.member_id)?;
        if version >= 3 {
            w.put_nullable_str(f, self.group_instance_id.as_deref())?;
        }
        if version >= 5 {
            w.put_nullable_str(f, self.protocol_type.as_deref())?;
            w.put_nullable_str(f, self.protocol_name.as_deref())?;
        }
        w.put_array(f, &self.assignments, |w, a| {
            w.put_str(f, &a.member_id)?;
            w.put_bytes(f, &a.assignment)?;
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}

/// SyncGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// The error.
    pub error_code: i16,
    /// The protocol type (v5+).
    pub protocol_type: Option<String>,
    /// The protocol name (v5+).
    pub protocol_name: Option<String>,
    /// The receiver's assignment.
    pub assignment: Vec<u8>,
}

impl<'a> Message<'a> for SyncGroupResponse {
    const API_KEY: ApiKey = ApiKey::SyncGroup;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = SyncGroupResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32()?;
        }
        out.error_code = r.i16()?;
        if version >= 5 {
            out.protocol_type = r.nullable_string(f)?;
            out.protocol_name = r.nullable_string(f)?;
        }
        out.assignment = r.bytes(f)?.to_vec();
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_i16(self.error_code);
        if version >= 5 {
            w.put_nullable_str(f, self.protocol_type.as_deref())?;
            w.put_nullable_str(f, self.protocol_name.as_deref())?;
        }
        w.put_bytes(f, &self.assignment)?;
        end_struct(w, f);
        Ok(())
    }
}
