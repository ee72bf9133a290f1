//! The trait every request and response body implements.

use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::error::{DecodeError, EncodeError};

/// A request or response body of one API, decodable and encodable at every
/// version in the API's supported range. Bodies borrow record bytes from
/// the buffer they were decoded from (lifetime `'a`); everything else is
/// owned.
///
/// Fields that a version does not have are skipped when encoding it and
/// take Kafka's default when decoding it. A value that a version cannot
/// carry (a null where the version has no null, a field the version lacks)
/// is written as that version's nearest value (empty string) or left out,
/// as Kafka's own broker does when it answers an older client.
pub trait Message<'a>: Sized {
    /// The API this body belongs to.
    const API_KEY: ApiKey;

    /// Decodes a body of `version` from `r`, leaving `r` after it.
    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError>;

    /// Appends the body encoded as `version` to `w`.
    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError>;

    /// Decodes a body of `version` that must fill `bytes` exactly.
    fn decode_exact(bytes: &'a [u8], version: i16) -> Result<Self, DecodeError> {
        let mut r = Decoder::new(bytes);
        let body = Self::decode(&mut r, version)?;
        r.finish()?;
        Ok(body)
    }

    /// The body encoded as `version`, in a new buffer.
    fn to_bytes(&self, version: i16) -> Result<Vec<u8>, EncodeError> {
        let mut w = Vec::new();
        self.encode(&mut w, version)?;
        Ok(w)
    }
}
