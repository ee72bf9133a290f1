//! Record batches (magic 2): a golden batch built byte by byte, round trips
//! through every codec, CRC failures, legacy magic, truncation, decompression
//! bounds, raw and xerial snappy, and corrupted compressed payloads.

mod common;

use common::B;
use kelp_kafka::record_batch::{set_base_offset, ATTR_TRANSACTIONAL, CRC_OFFSET};
use kelp_kafka::{
    encode_record_batch, Compression, DecodeError, Record, RecordBatch, RecordBatchHeader,
    RecordBatches, RecordHeader, RecordHeaders,
};

const MAX: usize = kelp_kafka::record_batch::DECOMPRESSED_BYTES_MAX;

/// Patches the CRC of a hand-built batch: CRC-32C of bytes 21.. at 17..21.
fn with_crc(mut batch: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// A batch header (61 bytes) with the CRC zeroed, for `records_len` bytes
/// of records.
fn header_bytes(attributes: i16, count: i32, last_delta: i32, records_len: usize) -> B {
    B::new()
        .i64(0) // base offset
        .i32((49 + records_len) as i32) // batch length: bytes after this field
        .i32(-1) // partition leader epoch
        .i8(2) // magic
        .raw(&[0; 4]) // crc, patched by with_crc
        .i16(attributes)
        .i32(last_delta)
        .i64(1000) // base timestamp
        .i64(1005) // max timestamp
        .i64(-1) // producer id
        .i16(-1) // producer epoch
        .i32(-1) // base sequence
        .i32(count)
}

/// One record, hand-encoded: key "k", value "v", header ("h", "1"),
/// timestamp delta 5, offset delta 0.
fn golden_record() -> Vec<u8> {
    B::new()
        .raw(&[0x18]) // length 12 (zigzag 24)
        .i8(0) // attributes
        .raw(&[0x0a]) // timestamp delta 5 (zigzag 10)
        .raw(&[0x00]) // offset delta 0
        .raw(&[0x02]) // key length 1
        .raw(b"k")
        .raw(&[0x02]) // value length 1
        .raw(b"v")
        .raw(&[0x02]) // one header
        .raw(&[0x02]) // header key length 1
        .raw(b"h")
        .raw(&[0x02]) // header value length 1
        .raw(b"1")
        .done()
}

fn golden_batch() -> Vec<u8> {
    let record = golden_record();
    let bytes = header_bytes(0, 1, 0, record.len()).raw(&record).done();
    with_crc(bytes)
}

const HEADERS: &[RecordHeader<'static>] = &[RecordHeader {
    key: "h",
    value: Some(b"1"),
}];

fn golden_header() -> RecordBatchHeader {
    RecordBatchHeader {
        base_offset: 0,
        partition_leader_epoch: -1,
        attributes: 0,
        last_offset_delta: 0,
        base_timestamp: 1000,
        max_timestamp: 1005,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        record_count: 1,
    }
}

#[test]
fn crc32c_is_the_castagnoli_polynomial() {
    // The standard check value of CRC-32C.
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn golden_batch_encodes_and_decodes() {
    let expected = golden_batch();
    assert_eq!(expected.len(), 74);
    let records = [Record {
        attributes: 0,
        timestamp_delta: 5,
        offset_delta: 0,
        key: Some(b"k"),
        value: Some(b"v"),
        headers: RecordHeaders::List(HEADERS),
    }];
    let mut out = Vec::new();
    encode_record_batch(
        &mut out,
        &golden_header(),
        &records,
        Compression::None,
        &mut Vec::new(),
    )
    .expect("encode");
    assert_eq!(out, expected);

    let (batch, used) = RecordBatch::decode(&expected).expect("decode");
    assert_eq!(used, expected.len());
    assert_eq!(batch.header, golden_header());
    assert_eq!(batch.header.last_offset(), 0);
    let mut scratch = Vec::new();
    let decoded = batch.record_list(&mut scratch, MAX).expect("records");
    assert_eq!(decoded.len(), 1);
    let r = &decoded[0];
    assert_eq!((r.timestamp_delta, r.offset_delta), (5, 0));
    assert_eq!((r.key, r.value), (Some(&b"k"[..]), Some(&b"v"[..])));
    let headers: Vec<RecordHeader<'_>> = r.headers.iter().collect();
    assert_eq!(headers, HEADERS);
}

#[test]
fn every_flipped_bit_under_the_crc_fails_the_crc() {
    let good = golden_batch();
    for at in 21..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[at] ^= bit;
            match RecordBatch::decode(&bad) {
                Err(DecodeError::ChecksumMismatch { .. }) => {}
                other => panic!("flip at {at}: {other:?}"),
            }
        }
    }
    // A flipped CRC byte fails too.
    let mut bad = good.clone();
    bad[CRC_OFFSET] ^= 1;
    assert!(matches!(
        RecordBatch::decode(&bad),
        Err(DecodeError::ChecksumMismatch { .. })
    ));
}

#[test]
fn legacy_magic_is_rejected_clearly() {
    for magic in [0i8, 1] {
        let mut bad = golden_batch();
        bad[16] = magic as u8;
        let err = RecordBatch::decode(&bad).expect_err("legacy");
        assert_eq!(err, DecodeError::UnsupportedMagic { magic });
        assert!(err.to_string().contains("legacy message sets"));
    }
}

#[test]
fn every_truncation_is_an_error() {
    let good = golden_batch();
    for cut in 0..good.len() {
        assert!(RecordBatch::decode(&good[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn bad_lengths_and_counts_are_errors() {
    // Batch length shorter than a header.
    let mut bad = golden_batch();
    bad[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert!(matches!(
        RecordBatch::decode(&bad),
        Err(DecodeError::InvalidLength { .. })
    ));
    // Negative batch length.
    bad[8..12].copy_from_slice(&(-5i32).to_be_bytes());
    assert!(RecordBatch::decode(&bad).is_err());

    // The header counts two records; only one is there.
    let record = golden_record();
    let two = with_crc(header_bytes(0, 2, 1, record.len()).raw(&record).done());
    let (batch, _) = RecordBatch::decode(&two).expect("batch");
    let mut scratch = Vec::new();
    let results: Vec<_> = batch.records(&mut scratch, MAX).expect("records").collect();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok());
    assert!(results[1].is_err());

    // The header counts zero records; one is there.
    let zero = with_crc(header_bytes(0, 0, 0, record.len()).raw(&record).done());
    let (batch, _) = RecordBatch::decode(&zero).expect("batch");
    let results: Vec<_> = batch.records(&mut scratch, MAX).expect("records").collect();
    assert!(matches!(
        results.as_slice(),
        [Err(DecodeError::TrailingBytes { .. })]
    ));

    // A negative record count.
    let neg = with_crc(header_bytes(0, -1, 0, 0).done());
    assert!(matches!(
        RecordBatch::decode(&neg),
        Err(DecodeError::InvalidBatch { .. })
    ));

    // Codec 7 does not exist.
    let unknown = with_crc(header_bytes(7, 0, 0, 0).done());
    assert_eq!(
        RecordBatch::decode(&unknown),
        Err(DecodeError::UnknownCompression { codec: 7 })
    );
}

/// Records with null keys, null values, empty values, several headers,
/// growing timestamps.
fn sample_records(values: &[Vec<u8>]) -> Vec<Record<'_>> {
    const MANY: &[RecordHeader<'static>] = &[
        RecordHeader {
            key: "trace",
            value: Some(b"abc"),
        },
        RecordHeader {
            key: "null",
            value: None,
        },
    ];
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            attributes: 0,
            timestamp_delta: i as i64 * 3,
            offset_delta: i as i32,
            key: if i % 3 == 0 { None } else { Some(&v[..4]) },
            value: if i % 7 == 0 { None } else { Some(&v[..]) },
            headers: if i % 2 == 0 {
                RecordHeaders::List(MANY)
            } else {
                RecordHeaders::NONE
            },
        })
        .collect()
}

fn values(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("value-{i:06}-{}", "x".repeat(i % 50)).into_bytes())
        .collect()
}

#[test]
fn every_codec_round_trips() {
    let values = values(1000);
    let records = sample_records(&values);
    let header = RecordBatchHeader {
        base_offset: 5000,
        partition_leader_epoch: 3,
        attributes: ATTR_TRANSACTIONAL,
        last_offset_delta: 0,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_002_997,
        producer_id: 42,
        producer_epoch: 1,
        base_sequence: 100,
        record_count: 0,
    };
    let mut sizes = Vec::new();
    let mut scratch = Vec::new();
    for codec in Compression::ALL {
        let mut out = Vec::new();
        encode_record_batch(&mut out, &header, &records, codec, &mut scratch).expect("encode");
        sizes.push((codec, out.len()));
        let (batch, used) = RecordBatch::decode(&out).expect("decode");
        assert_eq!(used, out.len());
        assert_eq!(batch.header.compression(), Ok(codec));
        assert!(batch.header.is_transactional());
        assert_eq!(batch.header.record_count, 1000);
        assert_eq!(batch.header.last_offset_delta, 999);
        assert_eq!(batch.header.last_offset(), 5999);
        assert_eq!(batch.header.producer_id, 42);
        assert_eq!(batch.header.base_sequence, 100);
        let mut dec = Vec::new();
        let decoded = batch
            .record_list(&mut dec, MAX)
            .unwrap_or_else(|e| panic!("{codec:?}: {e}"));
        assert_eq!(decoded.len(), records.len());
        for (d, r) in decoded.iter().zip(&records) {
            assert_eq!(d.timestamp_delta, r.timestamp_delta);
            assert_eq!(d.offset_delta, r.offset_delta);
            assert_eq!(d.key, r.key);
            assert_eq!(d.value, r.value);
            assert!(d.headers.iter().eq(r.headers.iter()), "{codec:?}");
        }
        // A flipped byte in the compressed payload fails the CRC.
        let mut bad = out.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x40;
        assert!(matches!(
            RecordBatch::decode(&bad),
            Err(DecodeError::ChecksumMismatch { .. })
        ));
    }
    // Compression must actually compress this repetitive data.
    let plain = sizes[0].1;
    for (codec, size) in &sizes[1..] {
        assert!(*size < plain / 2, "{codec:?}: {size} vs {plain}");
    }
}

/// `records` as one batch with a default header, compressed with `codec`.
fn batch_of(records: &[Record<'_>], codec: Compression) -> Vec<u8> {
    let mut out = Vec::new();
    encode_record_batch(
        &mut out,
        &RecordBatchHeader::default(),
        records,
        codec,
        &mut Vec::new(),
    )
    .expect("encode");
    out
}

#[test]
fn decompression_is_bounded() {
    let big = vec![0u8; 1 << 20];
    let records = [Record {
        attributes: 0,
        timestamp_delta: 0,
        offset_delta: 0,
        key: None,
        value: Some(&big),
        headers: RecordHeaders::NONE,
    }];
    for codec in Compression::ALL {
        let out = batch_of(&records, codec);
        let (batch, _) = RecordBatch::decode(&out).expect("decode");
        let mut scratch = Vec::new();
        if codec == Compression::None {
            // Uncompressed records are read in place: the batch's own
            // length already bounds them, and nothing is copied.
            assert!(batch.records(&mut scratch, 64 * 1024).is_ok());
            assert!(scratch.is_empty());
            continue;
        }
        assert_eq!(
            batch.records(&mut scratch, 64 * 1024).err(),
            Some(DecodeError::DecompressedTooLarge {
                max_bytes: 64 * 1024
            }),
            "{codec:?}"
        );
        assert!(
            scratch.len() <= 64 * 1024 + 1,
            "{codec:?}: {}",
            scratch.len()
        );
        assert!(batch.records(&mut scratch, 2 << 20).is_ok(), "{codec:?}");
    }
}

/// A batch whose records section is `payload`, with codec bits `codec`.
fn batch_with_payload(codec: i16, count: i32, last_delta: i32, payload: &[u8]) -> Vec<u8> {
    with_crc(
        header_bytes(codec, count, last_delta, payload.len())
            .raw(payload)
            .done(),
    )
}

#[test]
fn snappy_is_read_raw_and_xerial_framed() {
    let record = golden_record();
    // Raw snappy, as librdkafka writes it.
    let raw = snap::raw::Encoder::new()
        .compress_vec(&record)
        .expect("snappy");
    // Xerial framing, as the Java client writes it: magic, version 1,
    // compatible version 1, then (length INT32, raw block) pairs; here the
    // record split across two blocks.
    let (a, b) = record.split_at(5);
    let block_a = snap::raw::Encoder::new().compress_vec(a).expect("snappy");
    let block_b = snap::raw::Encoder::new().compress_vec(b).expect("snappy");
    let xerial = B::new()
        .raw(&[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0])
        .i32(1)
        .i32(1)
        .i32(block_a.len() as i32)
        .raw(&block_a)
        .i32(block_b.len() as i32)
        .raw(&block_b)
        .done();
    for payload in [raw, xerial] {
        let bytes = batch_with_payload(2, 1, 0, &payload);
        let (batch, _) = RecordBatch::decode(&bytes).expect("batch");
        let mut scratch = Vec::new();
        let records = batch.record_list(&mut scratch, MAX).expect("records");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].value, Some(&b"v"[..]));
    }
}

#[test]
fn lz4_and_gzip_and_zstd_from_their_reference_encoders() {
    // Payloads made by each codec's own library (not through the crate's
    // compress), to check the crate reads the standard formats.
    use std::io::Write;
    let record = golden_record();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&record).expect("gzip");
    let gzip = gz.finish().expect("gzip");
    let lz4 = {
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        enc.write_all(&record).expect("lz4");
        enc.finish().expect("lz4")
    };
    let zstd = zstd::encode_all(&record[..], 1).expect("zstd");
    for (codec, payload) in [(1, gzip), (3, lz4), (4, zstd)] {
        let bytes = batch_with_payload(codec, 1, 0, &payload);
        let (batch, _) = RecordBatch::decode(&bytes).expect("batch");
        let mut scratch = Vec::new();
        let records = batch.record_list(&mut scratch, MAX).expect("records");
        assert_eq!(records[0].key, Some(&b"k"[..]), "codec {codec}");
    }
}

#[test]
fn corrupted_compressed_payloads_are_errors_not_panics() {
    let values = values(50);
    let records = sample_records(&values);
    let mut seed = 0x5eed_u64;
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let out = batch_of(&records, codec);
        let payload = out[61..].to_vec();
        for _ in 0..300 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bad = payload.clone();
            let at = (seed as usize) % bad.len();
            bad[at] ^= (seed >> 32) as u8 | 1;
            let bytes = batch_with_payload(codec.id(), 50, 49, &bad);
            let (batch, _) = RecordBatch::decode(&bytes).expect("crc recomputed");
            let mut scratch = Vec::new();
            // Any outcome but a panic is fine; most are errors.
            if let Ok(records) = batch.records(&mut scratch, MAX) {
                for r in records {
                    if r.is_err() {
                        break;
                    }
                }
            }
        }
        // A payload that is not the codec's format at all.
        let bytes = batch_with_payload(codec.id(), 1, 0, b"definitely not compressed");
        let (batch, _) = RecordBatch::decode(&bytes).expect("batch");
        let mut scratch = Vec::new();
        assert!(batch.records(&mut scratch, MAX).is_err(), "{codec:?}");
    }
}

#[test]
fn batches_iterate_and_base_offsets_rewrite_without_breaking_the_crc() {
    let mut two = golden_batch();
    two.extend_from_slice(&golden_batch());
    set_base_offset(&mut two[74..], 1000).expect("rewrite");
    let batches: Vec<RecordBatch<'_>> = RecordBatches::new(&two)
        .collect::<Result<_, _>>()
        .expect("batches");
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].header.base_offset, 0);
    assert_eq!(batches[1].header.base_offset, 1000);
    assert!(set_base_offset(&mut [0u8; 4], 1).is_err());

    // A truncated trailing batch ends the iteration with an error.
    let cut = &two[..two.len() - 1];
    let results: Vec<_> = RecordBatches::new(cut).collect();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok() && results[1].is_err());
}

#[test]
fn malformed_records_are_errors() {
    // Record length -1, a negative key length other than -1, a header
    // count larger than the bytes, a non-UTF-8 header key.
    let cases: [&[u8]; 4] = [
        &[0x01],
        &[0x08, 0x00, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00, 0x00],
        &[0x08, 0x00, 0x00, 0x00, 0x01, 0x01, 0x7e, 0x00, 0x00],
        &[
            0x0c, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02, 0xff, 0x01, 0x00, 0x00, 0x00,
        ],
    ];
    for (i, record) in cases.iter().enumerate() {
        let bytes = batch_with_payload(0, 1, 0, record);
        let (batch, _) = RecordBatch::decode(&bytes).expect("batch");
        let mut scratch = Vec::new();
        let first = batch.records(&mut scratch, MAX).expect("records").next();
        assert!(matches!(first, Some(Err(_))), "case {i}: {first:?}");
    }
}

#[test]
fn zstd_frames_declaring_huge_windows_are_refused() {
    use std::io::Write;
    let record = golden_record();
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).expect("zstd");
    enc.window_log(27).expect("window");
    enc.include_contentsize(false).expect("no size");
    enc.long_distance_matching(true).expect("ldm");
    enc.write_all(&record).expect("write");
    enc.flush().expect("flush");
    let payload = enc.finish().expect("finish");
    // The frame is valid: zstd's default limit (2^27) reads it.
    assert_eq!(zstd::decode_all(&payload[..]).expect("valid frame"), record);
    let bytes = batch_with_payload(4, 1, 0, &payload);
    let (batch, _) = RecordBatch::decode(&bytes).expect("batch");
    let mut scratch = Vec::new();
    assert!(matches!(
        batch.records(&mut scratch, MAX),
        Err(DecodeError::Decompression { codec: "zstd", .. })
    ));
}
