//! Large values by reference: upload a payload to the filer, read it back.
//!
//! Two ways to the filer: straight to a directory this client shares with
//! the broker (`ClientOptions::payload_dir`, the broker's `<data dir>/filer`),
//! or through the broker's upload path, which streams pieces to a staging
//! file and hands the whole payload to the filer without touching a segment.
//! Either way the payload is stored durably before `upload_payload`
//! returns, so a reference published afterwards never points at nothing.
//!
//! Reads verify the length and CRC-32C the reference names; a missing or
//! altered payload is an error for that payload only.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use control::TopicName;
use filer::{Filer, FilerError, FilerUrl, LocalFiler};
use wire::checksum::crc32c_append;
use wire::{DataRequest, ErrorCode, PayloadId, PayloadRef, Response};

use crate::client::{unexpected, Client};
use crate::connection::Connection;
use crate::error::ClientError;

/// Bytes sent or read per request on the broker path (a frame holds 8 MiB).
pub const PAYLOAD_PIECE_BYTES: usize = 4 << 20;

/// Where payloads go.
#[derive(Debug, Clone)]
pub(crate) enum PayloadRoute {
    /// Through the broker's upload and read requests.
    Broker,
    /// Straight to the broker's filer: a directory shared with it, or the
    /// bucket it stores in.
    Direct(Arc<dyn Filer>),
}

impl PayloadRoute {
    pub(crate) fn open(
        payload_dir: Option<&Path>,
        payload_filer: Option<&str>,
    ) -> Result<PayloadRoute, ClientError> {
        match (payload_dir, payload_filer) {
            (None, None) => Ok(PayloadRoute::Broker),
            (Some(_), Some(_)) => Err(ClientError::Config(
                "give the payload directory or the payload filer URL, not both".to_owned(),
            )),
            (Some(dir), None) => {
                if !dir.is_dir() {
                    return Err(ClientError::Config(format!(
                        "payload directory {} does not exist (give the broker's <data dir>/filer)",
                        dir.display()
                    )));
                }
                let filer = LocalFiler::open(dir).map_err(|e| {
                    ClientError::Config(format!("payload directory {}: {e}", dir.display()))
                })?;
                Ok(PayloadRoute::Direct(Arc::new(filer)))
            }
            (None, Some(url)) => {
                let parsed = FilerUrl::parse(url)
                    .map_err(|e| ClientError::Config(format!("payload filer: {e}")))?;
                if let FilerUrl::Local(dir) = &parsed {
                    return PayloadRoute::open(Some(dir), None);
                }
                let filer = filer_s3::open(&parsed, &filer_s3::S3Settings::default())
                    .map_err(|e| ClientError::Config(format!("payload filer {url}: {e}")))?;
                Ok(PayloadRoute::Direct(filer))
            }
        }
    }
}

/// A fresh payload name: now, and 128 random bits.
fn new_payload_id() -> Result<PayloadId, ClientError> {
    let mut nonce = [0u8; 16];
    getrandom::getrandom(&mut nonce)
        .map_err(|e| ClientError::Config(format!("no randomness for a payload name: {e}")))?;
    let created_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Ok(PayloadId {
        created_ms,
        nonce: u128::from_le_bytes(nonce),
    })
}

fn topic_name(topic: &str) -> Result<TopicName, ClientError> {
    TopicName::parse(topic).map_err(|e| ClientError::Layout(e.to_string()))
}

fn payload_error(reference: &PayloadRef, e: &FilerError) -> ClientError {
    let code = match e {
        FilerError::NotFound { .. } => ErrorCode::PayloadNotFound,
        _ => ErrorCode::Storage,
    };
    ClientError::Broker {
        code,
        message: format!("payload {}: {e}", reference.id.object_name()),
    }
}

fn mismatch(reference: &PayloadRef, length: u64, checksum: u32) -> ClientError {
    ClientError::Broker {
        code: ErrorCode::PayloadMismatch,
        message: format!(
            "payload {} was altered: {length} bytes with CRC-32C {checksum:08x}, \
             the reference says {} bytes with {:08x}",
            reference.id.object_name(),
            reference.length,
            reference.checksum
        ),
    }
}

impl Client {
    /// Store `value` in the filer as a payload of `topic` and return the
    /// reference to publish in its place
    /// ([`crate::Producer::send_reference`]). The payload is durable when
    /// this returns. An upload never published is deleted by the broker's
    /// orphan sweep after its grace period (an hour by default).
    pub async fn upload_payload(
        &self,
        topic: &str,
        value: &[u8],
    ) -> Result<PayloadRef, ClientError> {
        let name = topic_name(topic)?;
        let reference = PayloadRef {
            id: new_payload_id()?,
            length: value.len() as u64,
            checksum: wire::checksum::crc32c(value),
        };
        match &self.inner.payloads {
            PayloadRoute::Direct(filer) => {
                let path = control::filer_layout::payload(&name, &reference.id);
                let filer = Arc::clone(filer);
                let bytes = value.to_vec();
                // A payload is created, never overwritten.
                tokio::task::spawn_blocking(move || filer.create(&path, &bytes))
                    .await
                    .map_err(|e| ClientError::Config(format!("upload task failed: {e}")))?
                    .map_err(|e| payload_error(&reference, &e))?;
            }
            PayloadRoute::Broker => {
                let conn = self.connection(self.payload_shard(&reference.id)).await?;
                for (i, piece) in value.chunks(PAYLOAD_PIECE_BYTES).enumerate() {
                    let write = DataRequest::PayloadWrite {
                        topic: topic.to_owned(),
                        id: reference.id,
                        offset: (i * PAYLOAD_PIECE_BYTES) as u64,
                        bytes: piece,
                    };
                    self.call_done(&conn, write, "uploading a payload").await?;
                }
                let commit = DataRequest::PayloadCommit {
                    topic: topic.to_owned(),
                    reference,
                };
                self.call_done(&conn, commit, "committing a payload")
                    .await?;
            }
        }
        Ok(reference)
    }

    /// Send one payload request on `conn` and expect `Done`.
    async fn call_done(
        &self,
        conn: &Connection,
        request: DataRequest<'_>,
        operation: &'static str,
    ) -> Result<(), ClientError> {
        let frame = conn
            .call(&request.into(), operation, self.request_timeout())
            .await?;
        match frame.response()? {
            Response::Done => Ok(()),
            _ => Err(unexpected(&frame, "done")),
        }
    }

    /// Read a whole payload, verified against `reference`. Memory grows
    /// with the bytes that arrive, not with the length the reference
    /// claims; for very large payloads use [`Client::open_payload`].
    pub async fn read_payload(
        &self,
        topic: &str,
        reference: &PayloadRef,
    ) -> Result<Bytes, ClientError> {
        let mut reader = self.open_payload(topic, reference)?;
        let mut out = Vec::new();
        while let Some(piece) = reader.next_piece().await? {
            if out.is_empty() && piece.len() as u64 == reference.length {
                return Ok(piece); // One piece: no copy.
            }
            out.extend_from_slice(&piece);
        }
        Ok(Bytes::from(out))
    }

    /// Stream a payload piece by piece; the last call checks its length
    /// and checksum.
    pub fn open_payload(
        &self,
        topic: &str,
        reference: &PayloadRef,
    ) -> Result<PayloadReader, ClientError> {
        Ok(PayloadReader {
            client: self.clone(),
            topic: topic.to_owned(),
            name: topic_name(topic)?,
            reference: *reference,
            offset: 0,
            checksum: 0,
            done: false,
        })
    }

    /// The shard that takes a payload's upload: spread by name.
    fn payload_shard(&self, id: &PayloadId) -> u16 {
        let shards = self.inner.shards.len().max(1) as u128;
        (id.nonce % shards) as u16
    }
}

/// Reads one payload in pieces of at most [`PAYLOAD_PIECE_BYTES`].
#[derive(Debug)]
pub struct PayloadReader {
    client: Client,
    topic: String,
    name: TopicName,
    reference: PayloadRef,
    offset: u64,
    checksum: u32,
    done: bool,
}

impl PayloadReader {
    /// The reference being read.
    pub fn reference(&self) -> &PayloadRef {
        &self.reference
    }

    /// The next piece, or `None` after the last one once the whole payload
    /// matched its reference. A payload that is missing, shorter, longer or
    /// different is an error (`PayloadNotFound` or `PayloadMismatch`).
    pub async fn next_piece(&mut self) -> Result<Option<Bytes>, ClientError> {
        if self.done {
            return Ok(None);
        }
        let (length, piece) = self.read_at(self.offset).await?;
        if length != self.reference.length || (piece.is_empty() && self.offset < length) {
            return Err(mismatch(&self.reference, length, self.checksum));
        }
        self.checksum = crc32c_append(self.checksum, &piece);
        self.offset += piece.len() as u64;
        if self.offset >= length {
            self.done = true;
            if self.checksum != self.reference.checksum {
                return Err(mismatch(&self.reference, self.offset, self.checksum));
            }
            if piece.is_empty() {
                return Ok(None);
            }
        }
        Ok(Some(piece))
    }

    /// The payload's stored length and up to one piece from `offset`.
    async fn read_at(&self, offset: u64) -> Result<(u64, Bytes), ClientError> {
        match &self.client.inner.payloads {
            PayloadRoute::Direct(filer) => {
                let filer = Arc::clone(filer);
                let path = control::filer_layout::payload(&self.name, &self.reference.id);
                let reference = self.reference;
                tokio::task::spawn_blocking(move || {
                    let length = filer.size(&path)?;
                    let want = length
                        .saturating_sub(offset)
                        .min(PAYLOAD_PIECE_BYTES as u64);
                    let mut buf = vec![0u8; want as usize];
                    // Short only at the object's end: the length check in
                    // `next_piece` catches a payload that shrank.
                    let n = filer.read_at(&path, offset, &mut buf)?;
                    buf.truncate(n);
                    Ok((length, Bytes::from(buf)))
                })
                .await
                .map_err(|e| ClientError::Config(format!("read task failed: {e}")))?
                .map_err(|e: FilerError| payload_error(&reference, &e))
            }
            PayloadRoute::Broker => {
                let conn = self
                    .client
                    .connection(self.client.payload_shard(&self.reference.id))
                    .await?;
                let frame = conn
                    .call(
                        &DataRequest::PayloadRead {
                            topic: self.topic.clone(),
                            id: self.reference.id,
                            offset,
                            max_bytes: PAYLOAD_PIECE_BYTES as u32,
                        }
                        .into(),
                        "reading a payload",
                        self.client.request_timeout(),
                    )
                    .await?;
                let (length, at, bytes) = match frame.response()? {
                    Response::PayloadBytes {
                        length,
                        offset,
                        bytes,
                    } => (length, offset, frame.payload.slice_ref(bytes)),
                    _ => return Err(unexpected(&frame, "payload bytes")),
                };
                if at != offset {
                    return Err(ClientError::UnexpectedResponse {
                        expected: "payload bytes at the offset asked for",
                        got: frame.header.frame_type,
                    });
                }
                Ok((length, bytes))
            }
        }
    }
}
