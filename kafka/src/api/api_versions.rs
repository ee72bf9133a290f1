//! ApiVersions (key 18), v0-v4; flexible from v3. The response always goes
//! with response header v0.

use crate::api::end;
use crate::api_key::{ApiKey, SUPPORTED_APIS};
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// ApiVersions request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsRequest {
    /// The client library's name (v3+).
    pub client_software_name: String,
    /// The client library's version (v3+).
    pub client_software_version: String,
}

impl<'a> Message<'a> for ApiVersionsRequest {
    const API_KEY: ApiKey = ApiKey::ApiVersions;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = ApiVersionsRequest::default();
        if version >= 3 {
            out.client_software_name = r.string(f)?;
            out.client_software_version = r.string(f)?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        if version >= 3 {
            w.put_str(f, &self.client_software_name)?;
            w.put_str(f, &self.client_software_version)?;
        }
        end_struct(w, f);
        Ok(())
    }
}

/// One API's supported version range, as the response lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersion {
    /// The API's wire key.
    pub api_key: i16,
    /// Lowest supported version.
    pub min_version: i16,
    /// Highest supported version.
    pub max_version: i16,
}

/// ApiVersions response. The v3+ tagged fields (supported and finalized
/// features, ZK migration) are skipped when decoding and never written:
/// kelp has no feature flags, and absent means default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsResponse {
    /// 0, or 35 (UNSUPPORTED_VERSION) when the request's version is unknown.
    pub error_code: i16,
    /// The supported APIs.
    pub api_keys: Vec<ApiVersion>,
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
}

impl ApiVersionsResponse {
    /// The response listing [`SUPPORTED_APIS`] with `error_code`.
    pub fn supported(error_code: i16) -> Self {
        ApiVersionsResponse {
            error_code,
            api_keys: SUPPORTED_APIS
                .iter()
                .map(|r| ApiVersion {
                    api_key: r.api_key.code(),
                    min_version: r.min,
                    max_version: r.max,
                })
                .collect(),
            throttle_time_ms: 0,
        }
    }
}

impl<'a> Message<'a> for ApiVersionsResponse {
    const API_KEY: ApiKey = ApiKey::ApiVersions;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let error_code = r.i16()?;
        let api_keys = r.array_of(f, |r| {
            let v = ApiVersion {
                api_key: r.i16()?,
                min_version: r.i16()?,
                max_version: r.i16()?,
            };
            end(r, f)?;
            Ok(v)
        })?;
        let throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
        end(r, f)?;
        Ok(ApiVersionsResponse {
            error_code,
            api_keys,
            throttle_time_ms,
        })
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_i16(self.error_code);
        w.put_array(f, &self.api_keys, |w, k| {
            w.put_i16(k.api_key);
            w.put_i16(k.min_version);
            w.put_i16(k.max_version);
            end_struct(w, f);
            Ok(())
        })?;
        if version >= 1 {
            w.put_i32(self.throttle_time_ms);
        }
        end_struct(w, f);
        Ok(())
    }
}
