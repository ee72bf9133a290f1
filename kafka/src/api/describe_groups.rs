//! DescribeGroups (key 15), v0-v5; flexible from v5.

use crate::api::{end, read_strings, write_strings};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// "Not requested" for authorized operations (INT32 min).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// DescribeGroups request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsRequest {
    /// The groups.
    pub groups: Vec<String>,
    /// Whether to include authorized operations (v3+).
    pub include_authorized_operations: bool,
}

impl<'a> Message<'a> for DescribeGroupsRequest {
    const API_KEY: ApiKey = ApiKey::DescribeGroups;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let groups = read_strings(r, f)?;
        let include_authorized_operations = if version >= 3 { r.bool()? } else { false };
        end(r, f)?;
        Ok(DescribeGroupsRequest {
            groups,
            include_authorized_operations,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        write_strings(w, f, &self.groups)?;
        if version >= 3 {
            w.put_bool(self.include_authorized_operations);
        }
        end_struct(w, f);
        Ok(())
    }
}

/// A member of a described group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedMember {
    /// The member id.
    pub member_id: String,
    /// Static membership id (v4+).
    pub group_instance_id: Option<String>,
    /// The member's client id.
    pub client_id: String,
    /// The member's host.
    pub client_host: String,
    /// Its protocol metadata.
    pub member_metadata: Vec<u8>,
    /// Its assignment.
    pub member_assignment: Vec<u8>,
}

/// A described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    /// The error.
    pub error_code: i16,
    /// The group.
    pub group_id: String,
    /// Its state ("Stable", "PreparingRebalance", ...).
    pub group_state: String,
    /// Its protocol type.
    pub protocol_type: String,
    /// Its chosen protocol.
    pub protocol_data: String,
    /// Its members.
    pub members: Vec<DescribedMember>,
    /// Authorized operations bit field (v3+).
    pub authorized_operations: i32,
}

impl Default for DescribedGroup {
    fn default() -> Self {
        DescribedGroup {
            error_code: 0,
            group_id: String::new(),
            group_state: String::new(),
            protocol_type: String::new(),
            protocol_data: String::new(),
            members: Vec::new(),
            authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
        }
    }
}

/// DescribeGroups response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// The groups.
    pub groups: Vec<DescribedGroup>,
}

impl<'a> Message<'a> for DescribeGroupsResponse {
    const API_KEY: ApiKey = ApiKey::DescribeGroups;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let groups = r.array_of(f, |r| {
            let mut g = DescribedGroup {
                error_code: r.i16()?,
                group_id: r.string(f)?,
                group_state: r.string(f)?,
                protocol_type: r.string(f)?,
                protocol_data: r.string(f)?,
                ..Default::default()
            };
            g.members = r.array_of(f, |r| {
                let member_id = r.string(f)?;
                let group_instance_id = if version >= 4 {
                    r.nullable_string(f)?
                } else {
                    None
                };
                let m = DescribedMember {
                    member_id,
                    group_instance_id,
                    client_id: r.string(f)?,
                    client_host: r.string(f)?,
                    member_metadata: r.bytes(f)?.to_vec(),
                    member_assignment: r.bytes(f)?.to_vec(),
                };
                end(r, f)?;
                Ok(m)
            })?;
            if version >= 3 {
                g.authorized_operations = r.i32()?;
            }
            end(r, f)?;
            Ok(g)
        })?;
        end(r, f)?;
        Ok(DescribeGroupsResponse {
            throttle_time_ms,
            groups,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_array(f, &self.groups, |w, g| {
            w.put_i16(g.error_code);
            w.put_str(f, &g.group_id)?;
            w.put_str(f, &g.group_state)?;
            w.put_str(f, &g.protocol_type)?;
            w.put_str(f, &g.protocol_data)?;
            w.put_array(f, &g.members, |w, m| {
                w.put_str(f, &m.member_id)?;
                if version >= 4 {
                    w.put_nullable_str(f, m.group_instance_id.as_deref())?;
                }
                w.put_str(f, &m.client_id)?;
                w.put_str(f, &m.client_host)?;
                w.put_bytes(f, &m.member_metadata)?;
                w.put_bytes(f, &m.member_assignment)?;
                end_struct(w, f);
                Ok(())
            })?;
            if version >= 3 {
                w.put_i32(g.authorized_operations);
            }
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}
