//! ListGroups (key 16), v0-v4; flexible from v3.

use crate::api::{end, read_strings, write_strings};
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// ListGroups request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsRequest {
    /// Only groups in these states (v4+; empty for all).
    pub states_filter: Vec<String>,
}

impl<'a> Message<'a> for ListGroupsRequest {
    const API_KEY: ApiKey = ApiKey::ListGroups;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let states_filter = if version >= 4 {
            read_strings(r, f)?
        } else {
            Vec::new()
        };
        end(r, f)?;
        Ok(ListGroupsRequest { states_filter })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 4 {
            write_strings(w, f, &self.states_filter)?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// A listed group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedGroup {
    /// The group.
    pub group_id: String,
    /// Its protocol type.
    pub protocol_type: String,
    /// Its state (v4+).
    pub group_state: String,
}

/// ListGroups response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsResponse {
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
    /// The error.
    pub error_code: i16,
    /// The groups.
    pub groups: Vec<ListedGroup>,
}

impl<'a> Message<'a> for ListGroupsResponse {
    const API_KEY: ApiKey = ApiKey::ListGroups;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        let error_code = r.i16()?;
        let groups = r.array_of(f, |r| {
            let mut g = ListedGroup {
                group_id: r.string(f)?,
                protocol_type: r.string(f)?,
                group_state: String::new(),
            };
            if version >= 4 {
                g.group_state = r.string(f)?;
            }
            end(r, f)?;
            Ok(g)
        })?;
        end(r, f)?;
        Ok(ListGroupsResponse {
            throttle_time_ms,
            error_code,
            groups,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        w.put_i16(self.error_code);
        w.put_array(f, &self.groups, |w, g| {
            w.put_str(f, &g.group_id)?;
            w.put_str(f, &g.protocol_type)?;
            if version >= 4 {
                w.put_str(f, &g.group_state)?;
            }
            end_struct(w, f);
            Ok(())
        })?;
        end_struct(w, f);
        Ok(())
    }
}
