//! The record batch compression codecs: gzip, snappy, lz4, zstd.
//!
//! Owns: compressing a batch's records section and decompressing it into a
//! caller's reusable buffer, never past a size limit. Snappy is read both
//! raw and in the xerial framing the Java client writes, and written
//! xerial-framed, as the Java client does (librdkafka, kafka-python and
//! kafkajs read both). Lz4 is the standard LZ4 frame format (what Kafka
//! uses since message format v1 fixed its header checksum). Never touches
//! anything but memory.

use std::io::{Read, Write};

use crate::error::{DecodeError, EncodeError};

/// The compression codec in bits 0-2 of a batch's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// 0: none.
    None,
    /// 1: gzip.
    Gzip,
    /// 2: snappy.
    Snappy,
    /// 3: lz4 (frame format).
    Lz4,
    /// 4: zstd.
    Zstd,
}

/// The mask of the codec bits in a batch's attributes.
pub const COMPRESSION_MASK: i16 = 0x07;

/// The xerial snappy stream header: magic, then version and compatible
/// version as big-endian INT32 (both 1).
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_BYTES: usize = 16;
/// The uncompressed size of one xerial block written here (the Java
/// client's default).
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// The zstd level used when compressing (zstd's default, and Kafka's).
const ZSTD_LEVEL: i32 = 3;
/// The largest zstd window accepted when decompressing, as a power of two
/// (32 MiB). The decoder allocates the window a frame declares, so this
/// bounds what one batch can make it allocate; zstd's own default (2^27)
/// is only needed by levels 21-22 without a known input size.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 25;

impl Compression {
    /// Every codec.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec named by a batch's attributes.
    pub fn from_attributes(attributes: i16) -> Result<Self, DecodeError> {
        let codec = (attributes & COMPRESSION_MASK) as u8;
        Ok(match codec {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return Err(DecodeError::UnknownCompression { codec }),
        })
    }

    /// The codec's id in the attributes.
    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec's name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The error of this codec failing to compress.
    fn compress_error(self, reason: impl ToString) -> EncodeError {
        EncodeError::Compression {
            codec: self.name(),
            reason: reason.to_string(),
        }
    }

    /// The error of this codec failing to decompress.
    fn decompress_error(self, reason: impl ToString) -> DecodeError {
        DecodeError::Decompression {
            codec: self.name(),
            reason: reason.to_string(),
        }
    }

    /// Appends `input` compressed with this codec to `out`.
    pub fn compress(self, input: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let fail = |e| self.compress_error(e);
        match self {
            Compression::None => out.extend_from_slice(input),
            Compression::Gzip => {
                let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
                enc.write_all(input).map_err(fail)?;
                enc.finish().map_err(fail)?;
            }
            Compression::Snappy => compress_xerial(input, out)?,
            Compression::Lz4 => {
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB)
                    .block_mode(lz4_flex::frame::BlockMode::Independent);
                let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
                enc.write_all(input).map_err(fail)?;
                enc.finish().map_err(|e| self.compress_error(e))?;
            }
            Compression::Zstd => {
                zstd::stream::copy_encode(input, out, ZSTD_LEVEL).map_err(fail)?;
            }
        }
        Ok(())
    }

    /// Replaces the contents of `out` with `input` decompressed, failing
    /// once more than `max_bytes` would come out.
    pub fn decompress(
        self,
        input: &[u8],
        out: &mut Vec<u8>,
        max_bytes: usize,
    ) -> Result<(), DecodeError> {
        out.clear();
        let fail = |e| self.decompress_error(e);
        match self {
            Compression::None => {
                if input.len() > max_bytes {
                    return Err(DecodeError::DecompressedTooLarge { max_bytes });
                }
                out.extend_from_slice(input);
                Ok(())
            }
            Compression::Snappy if input.starts_with(&XERIAL_MAGIC) => {
                decompress_xerial(input, out, max_bytes)
            }
            Compression::Snappy => decompress_raw_snappy(input, out, max_bytes),
            Compression::Gzip => {
                let stream = flate2::read::MultiGzDecoder::new(input);
                read_bounded(self, stream, out, max_bytes)
            }
            Compression::Lz4 => {
                let stream = lz4_flex::frame::FrameDecoder::new(input);
                read_bounded(self, stream, out, max_bytes)
            }
            Compression::Zstd => {
                let mut stream = zstd::stream::read::Decoder::with_buffer(input).map_err(fail)?;
                stream.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(fail)?;
                read_bounded(self, stream, out, max_bytes)
            }
        }
    }
}

/// Reads `codec`'s decompressing `stream` to its end into `out`, at most
/// `max_bytes`.
fn read_bounded(
    codec: Compression,
    stream: impl Read,
    out: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<(), DecodeError> {
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    stream
        .take(limit)
        .read_to_end(out)
        .map_err(|e| codec.decompress_error(e))?;
    if out.len() > max_bytes {
        return Err(DecodeError::DecompressedTooLarge { max_bytes });
    }
    Ok(())
}

fn snappy_error(e: impl ToString) -> DecodeError {
    Compression::Snappy.decompress_error(e)
}

/// Appends one raw snappy block's decompressed bytes to `out`, keeping the
/// total within `max_bytes`.
fn decompress_raw_snappy(
    input: &[u8],
    out: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<(), DecodeError> {
    let len = snap::raw::decompress_len(input).map_err(snappy_error)?;
    let start = out.len();
    if start.saturating_add(len) > max_bytes {
        return Err(DecodeError::DecompressedTooLarge { max_bytes });
    }
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(input, &mut out[start..])
        .map_err(snappy_error)?;
    out.truncate(start + written);
    Ok(())
}

/// Xerial framing: the 16-byte header, then blocks of `length INT32` and
/// that many bytes of raw snappy.
fn decompress_xerial(input: &[u8], out: &mut Vec<u8>, max_bytes: usize) -> Result<(), DecodeError> {
    let mut rest = input
        .get(XERIAL_HEADER_BYTES..)
        .ok_or_else(|| snappy_error("xerial header truncated"))?;
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(snappy_error("xerial block length truncated"));
        };
        let len = i32::from_be_bytes(*len);
        let block = usize::try_from(len)
            .ok()
            .and_then(|n| tail.get(..n))
            .ok_or_else(|| {
                snappy_error(format!(
                    "xerial block of {len} bytes with {} left",
                    tail.len()
                ))
            })?;
        decompress_raw_snappy(block, out, max_bytes)?;
        rest = &tail[block.len()..];
    }
    Ok(())
}

fn compress_xerial(input: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in input.chunks(XERIAL_BLOCK_BYTES) {
        let len_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        out.resize(start + snap::raw::max_compress_len(chunk.len()), 0);
        let written = encoder
            .compress(chunk, &mut out[start..])
            .map_err(|e| Compression::Snappy.compress_error(e))?;
        out.truncate(start + written);
        // A block holds at most a 32 KiB chunk, so its length fits an i32.
        out[len_at..start].copy_from_slice(&(written as i32).to_be_bytes());
    }
    Ok(())
}
