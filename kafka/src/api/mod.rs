//! One module per Kafka API: its request and response bodies, decoded and
//! encoded at every supported version. Field lists and version ranges follow
//! Kafka's message definitions (`clients/src/main/resources/common/message`).

pub mod api_versions;
pub mod create_topics;
pub mod delete_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod produce;
pub mod sync_group;

use crate::decoder::Decoder;
use crate::encoder::Encoder;
use crate::error::{DecodeError, EncodeError};

/// Reads an array of INT32.
pub(crate) fn read_i32s(r: &mut Decoder<'_>, f: bool) -> Result<Vec<i32>, DecodeError> {
    r.array_of(f, |r| r.i32())
}

/// Writes an array of INT32.
pub(crate) fn write_i32s(w: &mut Vec<u8>, f: bool, v: &[i32]) -> Result<(), EncodeError> {
    w.put_array(f, v, |w, x| {
        w.put_i32(*x);
        Ok(())
    })
}

/// Reads an array of strings.
pub(crate) fn read_strings(r: &mut Decoder<'_>, f: bool) -> Result<Vec<String>, DecodeError> {
    r.array_of(f, |r| r.string(f))
}

/// Writes an array of strings.
pub(crate) fn write_strings(w: &mut Vec<u8>, f: bool, v: &[String]) -> Result<(), EncodeError> {
    w.put_array(f, v, |w, s| w.put_str(f, s))
}

/// Skips the tagged fields that end a struct in a flexible version.
pub(crate) fn end(r: &mut Decoder<'_>, f: bool) -> Result<(), DecodeError> {
    if f {
        r.skip_tagged_fields()?;
    }
    Ok(())
}
