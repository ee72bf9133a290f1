//! Request and response headers.
//!
//! Request header v0: api_key INT16, api_version INT16, correlation_id INT32.
//! v1 adds client_id NULLABLE_STRING (always the classic INT16-prefixed
//! form, even in v2). v2 adds a tagged-field buffer. Response header v0:
//! correlation_id INT32; v1 adds a tagged-field buffer. Which version a
//! message uses is [`ApiKey::request_header_version`] and
//! [`ApiKey::response_header_version`].

use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::Encoder;
use crate::error::{DecodeError, EncodeError};

/// A request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// The API's wire key (kept raw: it may be one this codec does not know).
    pub api_key: i16,
    /// The API version of the body.
    pub api_version: i16,
    /// Echoed in the response.
    pub correlation_id: i32,
    /// The client's id (v1+); `None` when null or in v0.
    pub client_id: Option<String>,
}

impl RequestHeader {
    /// Decodes a header of `header_version` (0, 1 or 2).
    pub fn decode(r: &mut Decoder<'_>, header_version: i16) -> Result<Self, DecodeError> {
        let api_key = r.i16()?;
        let api_version = r.i16()?;
        let correlation_id = r.i32()?;
        let client_id = if header_version >= 1 {
            r.nullable_string(false)?
        } else {
            None
        };
        if header_version >= 2 {
            r.skip_tagged_fields()?;
        }
        Ok(RequestHeader {
            api_key,
            api_version,
            correlation_id,
            client_id,
        })
    }

    /// Encodes this header as `header_version`.
    pub fn encode(&self, w: &mut Vec<u8>, header_version: i16) -> Result<(), EncodeError> {
        w.put_i16(self.api_key);
        w.put_i16(self.api_version);
        w.put_i32(self.correlation_id);
        if header_version >= 1 {
            w.put_nullable_str(false, self.client_id.as_deref())?;
        }
        if header_version >= 2 {
            w.put_empty_tagged_fields();
        }
        Ok(())
    }

    /// The header version a request of `api_key` at `api_version` uses.
    pub fn version_for(api_key: ApiKey, api_version: i16) -> i16 {
        api_key.request_header_version(api_version)
    }
}

/// A response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's correlation id.
    pub correlation_id: i32,
}

impl ResponseHeader {
    /// Decodes a header of `header_version` (0 or 1).
    pub fn decode(r: &mut Decoder<'_>, header_version: i16) -> Result<Self, DecodeError> {
        let correlation_id = r.i32()?;
        if header_version >= 1 {
            r.skip_tagged_fields()?;
        }
        Ok(ResponseHeader { correlation_id })
    }

    /// Encodes this header as `header_version`.
    pub fn encode(&self, w: &mut Vec<u8>, header_version: i16) {
        w.put_i32(self.correlation_id);
        if header_version >= 1 {
            w.put_empty_tagged_fields();
        }
    }
}
