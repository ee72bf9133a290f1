//! LeaveGroup (key 13), v0-v5; flexible from v4. v0-v2 name one member;
//! v3+ carry a members array, and the response answers each member.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// A member that leaves (v3+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeavingMember {
    /// The member id.
    pub member_id: String,
    /// Static membership id.
    pub group_instance_id: Option<String>,
    /// Why it leaves (v5+).
    pub reason: Option<String>,
}

/// LeaveGroup request. For v0-v2, `members` holds the one member named by
/// the request's member id (decoding fills it, encoding reads its first
/// entry), so a handler sees one shape for every version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupRequest {
    /// The group.
    pub group_id: String,
    /// The members leaving.
    pub members: Vec<LeavingMember>,
}

impl<'a> Message<'a> for LeaveGroupRequest {
    const API_KEY: ApiKey = ApiKey::LeaveGroup;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let group_id = r.string(f)?;
        let members = if version <= 2 {
            vec![LeavingMember {
                member_id: r.string(f)?,
                ..Default::default()
            }]
        } else {
            r.array_of(f, |r| {
                let member_id = r.string(f)?;
                let group_instance_id = r.nullable_string(f)?;
                let reason = if version >= 5 {
                    r.nullable_string(f)?
                } else {
                    None
                };
                end(r, f)?;
                Ok(LeavingMember {
                    member_id,
                    group_instance_id,
                    reason,
                })
            })?
        };
        end(r, f)?;
        Ok(LeaveGroupRequest { group_id, members })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_str(f, &self.group_id)?;
        if version <= 2 {
            let member_id = self.members.first().map_or("", |m| m.member_id.as_str());
            w.put_str(f, member_id)?;
        } else {
            w.put_array(f, &self.members, |w, m| {
                w.put_str(f, &m.member_id)?;
                w.put_nullable_str(f, m.group_instance_id.as_deref())?;
                if version >= 5 {
                    w.put_nullable_str(f, m.reason.as_deref())?;
                }
                end_struct(w, f);
                Ok(())
            })?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// One member's answer (v3+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeftMember {
    /// The member id.
    pub member_id: String,
    /// Static membership id.
    pub group_instance_id: Option<String>,
    /// This member's error.
    pub error_code: i16,
}

/// LeaveGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// The top-level error.
    pub error_code: i16,
    /// Per-member errors (v3+).
    pub members: Vec<LeftMember>,
}

impl<'a> Message<'a> for LeaveGroupResponse {
    const API_KEY: ApiKey = ApiKey::LeaveGroup;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = LeaveGroupResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32()?;
        }
        out.error_code = r.i16()?;
        if version >= 3 {
            out.members = r.array_of(f, |r| {
                let m = LeftMember {
                    member_id: r.string(f)?,
                    group_instance_id: r.nullable_string(f)?,
                    error_code: r.i16()?,
                };
                end(r, f)?;
                Ok(m)
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
        w.put_i16(self.error_code);
        if version >= 3 {
            w.put_array(f, &self.members, |w, m| {
                w.put_str(f, &m.member_id)?;
                w.put_nullable_str(f, m.group_instance_id.as_deref())?;
                w.put_i16(m.error_code);
                end_struct(w, f);
                Ok(())
            })?;
        }
        end_struct(w, f);
        Ok(())
    }
}
