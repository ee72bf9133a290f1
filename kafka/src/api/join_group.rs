//! JoinGroup (key 11), v0-v9; flexible from v6.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// One assignment protocol a member supports, with its metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupProtocol {
    /// The protocol name (e.g. "range").
    pub name: String,
    /// Opaque protocol metadata (subscription).
    pub metadata: Vec<u8>,
}

/// JoinGroup request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupRequest {
    /// The group.
    pub group_id: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (v1+; v0 takes the session timeout, as Kafka does).
    pub rebalance_timeout_ms: i32,
    /// The member id; empty on the first join.
    pub member_id: String,
    /// Static membership id (v5+).
    pub group_instance_id: Option<String>,
    /// The protocol type (e.g. "consumer").
    pub protocol_type: String,
    /// The supported protocols, in preference order.
    pub protocols: Vec<JoinGroupProtocol>,
    /// Why the member joins (v8+).
    pub reason: Option<String>,
}

impl<'a> Message<'a> for JoinGroupRequest {
    const API_KEY: ApiKey = ApiKey::JoinGroup;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let group_id = r.string(f)?;
        let session_timeout_ms = r.i32()?;
        let rebalance_timeout_ms = if version >= 1 {
            r.i32()?
        } else {
            session_timeout_ms
        };
        let member_id = r.string(f)?;
        let group_instance_id = if version >= 5 {
            r.nullable_string(f)?
        } else {
            None
        };
        let protocol_type = r.string(f)?;
        let protocols = r.array_of(f, |r| {
            let p = JoinGroupProtocol {
                name: r.string(f)?,
                metadata: r.bytes(f)?.to_vec(),
            };
            end(r, f)?;
            Ok(p)
        })?;
        let reason = if version >= 8 {
            r.nullable_string(f)?
        } else {
            None
        };
        end(r, f)?;
        Ok(JoinGroupRequest {
            group_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            member_id,
            group_instance_id,
            protocol_type,
            protocols,
            reason,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_str(f, &self.group_id)?;
        w.put_i32(self.session_timeout_ms);
        if version >= 1 {
            w.put_i32(self.rebalance_timeout_ms);
        }
        w.put_str(f, &self.member_id)?;
        if version >= 5 {
            w.put_nullable_str(f, self.group_instance_id.as_deref())?;
        }
        w.put_str(f, &self.protocol_type)?;
        w.put_array(f, &self.protocols, |w, p| {
            w.put_str(f, &p.name)?;
            w.put_bytes(f, &p.metadata)?;
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 8 {
            w.put_nullable_str(f, self.reason.as_deref())?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupMember {
    /// The member id.
    pub member_id: String,
    /// Static membership id (v5+).
    pub group_instance_id: Option<String>,
    /// The member's metadata for the chosen protocol.
    pub metadata: Vec<u8>,
}

/// JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupResponse {
    /// Throttle time (v2+).
    pub throttle_time_ms: i32,
    /// The error.
    pub error_code: i16,
    /// The generation (-1 on error).
    pub generation_id: i32,
    /// The protocol type (v7+).
    pub protocol_type: Option<String>,
    /// The chosen protocol (nullable from v7; written empty before).
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// Whether the leader should skip assigning (v9+).
    pub skip_assignment: bool,
    /// The receiver's member id.
    pub member_id: String,
    /// All members, sent to the leader only.
    pub members: Vec<JoinGroupMember>,
}

impl<'a> Message<'a> for JoinGroupResponse {
    const API_KEY: ApiKey = ApiKey::JoinGroup;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = JoinGroupResponse::default();
        if version >= 2 {
            out.throttle_time_ms = r.i32()?;
        }
        out.error_code = r.i16()?;
        out.generation_id = r.i32()?;
        if version >= 7 {
            out.protocol_type = r.nullable_string(f)?;
            out.protocol_name = r.nullable_string(f)?;
        } else {
            out.protocol_name = Some(r.string(f)?);
        }
        out.leader = r.string(f)?;
        if version >= 9 {
            out.skip_assignment = r.bool()?;
        }
        out.member_id = r.string(f)?;
        out.members = r.array_of(f, |r| {
            let member_id = r.string(f)?;
            let group_instance_id = if version >= 5 {
                r.nullable_string(f)?
            } else {
                None
            };
            let metadata = r.bytes(f)?.to_vec();
            end(r, f)?;
            Ok(JoinGroupMember {
                member_id,
                group_instance_id,
                metadata,
            })
        })?;
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 2 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_i16(self.error_code);
        w.put_i32(self.generation_id);
        if version >= 7 {
            w.put_nullable_str(f, self.protocol_type.as_deref())?;
            w.put_nullable_str(f, self.protocol_name.as_deref())?;
        } else {
            w.put_str(f, self.protocol_name.as_deref().unwrap_or(""))?;
        }
        w.put_str(f, &self.leader)?;
        if version >= 9 {
            w.put_bool(self.skip_assignment);
        }
        w.put_str(f, &self.member_id)?;
        w.put_array(f, &self.members, |w, m| {
            w.put_str(f, &m.member_id)?;
            if version >= 5 {
                w.put_nullable_str(f, m.group_instance_id.as_deref())?;
            }
            w.put_bytes(f, &m.metadata)?;
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}
