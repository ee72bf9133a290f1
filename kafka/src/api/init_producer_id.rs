//! InitProducerId (key 22), v0-v4; flexible from v2.

use crate::api::end;
use crate::api_key::ApiKey;
use crate::decoder::Decoder;
use crate::encoder::{end_struct, Encoder};
use crate::error::{DecodeError, EncodeError};
use crate::message::{flexible, Message};

/// InitProducerId request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    /// The transactional id; `None` for an idempotent-only producer.
    pub transactional_id: Option<String>,
    /// Transaction timeout.
    pub transaction_timeout_ms: i32,
    /// The current producer id, to bump its epoch (v3+; -1 for none).
    pub producer_id: i64,
    /// The current epoch (v3+; -1 for none).
    pub producer_epoch: i16,
}

impl Default for InitProducerIdRequest {
    fn default() -> Self {
        InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: 0,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

impl<'a> Message<'a> for InitProducerIdRequest {
    const API_KEY: ApiKey = ApiKey::InitProducerId;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let mut out = InitProducerIdRequest {
            transactional_id: r.nullable_string(f)?,
            transaction_timeout_ms: r.i32()?,
            ..Default::default()
        };
        if version >= 3 {
            out.producer_id = r.i64()?;
            out.producer_epoch = r.i16()?;
        }
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_nullable_str(f, self.transactional_id.as_deref())?;
        w.put_i32(self.transaction_timeout_ms);
        if version >= 3 {
            w.put_i64(self.producer_id);
            w.put_i16(self.producer_epoch);
        }
        end_struct(w, f);
        Ok(())
    }
}

/// InitProducerId response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InitProducerIdResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// The error.
    pub error_code: i16,
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
}

impl<'a> Message<'a> for InitProducerIdResponse {
    const API_KEY: ApiKey = ApiKey::InitProducerId;

    fn decode(r: &mut Decoder<'a>, version: i16) -> Result<Self, DecodeError> {
        let f = flexible::<Self>(version);
        let out = InitProducerIdResponse {
            throttle_time_ms: r.i32()?,
            error_code: r.i16()?,
            producer_id: r.i64()?,
            producer_epoch: r.i16()?,
        };
        end(r, f)?;
        Ok(out)
    }

    fn encode(&self, w: &mut Vec<u8>, version: i16) -> Result<(), EncodeError> {
        let f = flexible::<Self>(version);
        w.put_i32(self.throttle_time_ms);
        w.put_i16(self.error_code);
        w.put_i64(self.producer_id);
        w.put_i16(self.producer_epoch);
        end_struct(w, f);
        Ok(())
    }
}
