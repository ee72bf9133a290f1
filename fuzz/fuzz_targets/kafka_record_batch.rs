//! kelp_kafka's record-batch decoder over arbitrary bytes as a records field
//! (what a Produce request carries): every batch, record and header, with
//! compressed batches decompressed within DECOMPRESSED_BYTES_MAX, the limit
//! the gateway uses. The bytes are read twice: as given, and with each
//! batch's CRC recomputed so that mutations reach the header fields and
//! records behind it.
//!
//! Decompression is checked against a second, small limit: it succeeds
//! exactly when the whole output fits, with the same bytes, and otherwise
//! fails with DecompressedTooLarge. A batch whose records all decode
//! re-encodes with its own codec to a batch that decodes to the same
//! records, unless its last record's offset delta is negative, which the
//! encoder refuses.
#![no_main]

use kelp_kafka::record_batch::{
    ATTRIBUTES_OFFSET, BATCH_HEADER_BYTES, BATCH_LENGTH_BASE_BYTES, BATCH_LENGTH_OFFSET,
    CRC_OFFSET, DECOMPRESSED_BYTES_MAX,
};
use kelp_kafka::{
    encode_record_batch, Compression, DecodeError, EncodeError, Record, RecordBatch,
    RecordBatchHeader, RecordBatches, RecordHeader, RecordHeaders,
};
use libfuzzer_sys::fuzz_target;

/// A limit most fuzz inputs decompress past, so the refusal is exercised.
const SMALL_LIMIT_BYTES: usize = 4096;

/// A record with its headers as a list: re-encoding may write varints
/// shorter than the input did, so encoded header bytes can differ.
#[derive(Debug, PartialEq)]
struct Flat<'a> {
    record: Record<'a>,
    headers: Vec<RecordHeader<'a>>,
}

impl<'a> Flat<'a> {
    fn new(record: Record<'a>) -> Self {
        let headers: Vec<_> = record.headers.iter().collect();
        assert_eq!(headers.len(), record.headers.len());
        Flat {
            record: Record {
                headers: RecordHeaders::NONE,
                ..record
            },
            headers,
        }
    }

    fn record(&self) -> Record<'_> {
        Record {
            headers: RecordHeaders::List(&self.headers),
            ..self.record
        }
    }
}

/// Every record of `batch` as the gateway reads them, or `None` if the
/// records section does not decompress or a record does not decode.
fn records<'b>(batch: &'b RecordBatch<'_>, scratch: &'b mut Vec<u8>) -> Option<Vec<Flat<'b>>> {
    let records = batch.records(scratch, DECOMPRESSED_BYTES_MAX).ok()?;
    let mut out = Vec::new();
    for record in records {
        out.push(Flat::new(record.ok()?));
    }
    assert_eq!(out.len(), batch.header.record_count as usize);
    Some(out)
}

/// Decompression of `input` under the real limit and under a small one.
fn check_limit(codec: Compression, input: &[u8], full_out: &mut Vec<u8>, small_out: &mut Vec<u8>) {
    let full = codec.decompress(input, full_out, DECOMPRESSED_BYTES_MAX);
    let small = codec.decompress(input, small_out, SMALL_LIMIT_BYTES);
    match (&full, small) {
        (Ok(()), Ok(())) => {
            assert!(small_out.len() <= SMALL_LIMIT_BYTES);
            assert_eq!(small_out, full_out);
        }
        (Ok(()), Err(e)) => {
            assert!(full_out.len() > SMALL_LIMIT_BYTES, "{codec:?}: {e}");
            assert_eq!(
                e,
                DecodeError::DecompressedTooLarge {
                    max_bytes: SMALL_LIMIT_BYTES
                }
            );
        }
        (Err(e), Ok(())) => panic!("{codec:?} fits the small limit but not the real one: {e}"),
        (Err(_), Err(_)) => {}
    }
    if full.is_ok() {
        assert!(full_out.len() <= DECOMPRESSED_BYTES_MAX);
    }
}

fn walk(records_field: &[u8]) {
    let mut full = Vec::new();
    let mut small = Vec::new();
    let mut scratch = Vec::new();
    let mut encoded = Vec::new();
    let mut encode_scratch = Vec::new();
    let mut again_scratch = Vec::new();
    let mut taken = 0;
    for batch in RecordBatches::new(records_field) {
        let Ok(batch) = batch else {
            break;
        };
        let bytes = batch.bytes;
        assert_eq!(bytes, &records_field[taken..taken + bytes.len()]);
        taken += bytes.len();
        let header = batch.header;
        assert!(header.record_count >= 0 && header.last_offset_delta >= 0);
        let codec = header
            .compression()
            .expect("a decoded batch names a known codec");
        check_limit(codec, batch.records, &mut full, &mut small);

        let Some(decoded) = records(&batch, &mut scratch) else {
            continue;
        };
        let rebuilt: Vec<Record<'_>> = decoded.iter().map(Flat::record).collect();
        let last_offset_delta = decoded.last().map_or(0, |d| d.record.offset_delta);
        encoded.clear();
        let written =
            encode_record_batch(&mut encoded, &header, &rebuilt, codec, &mut encode_scratch);
        if last_offset_delta < 0 {
            // Records decode with any offset delta; a batch cannot end on
            // a negative one.
            assert!(matches!(written, Err(EncodeError::InvalidBatch { .. })));
            assert!(encoded.is_empty());
            continue;
        }
        written.expect("a decoded batch encodes");
        let (again, used) = RecordBatch::decode(&encoded).expect("a re-encoded batch decodes");
        assert_eq!(used, encoded.len());
        let expected_header = RecordBatchHeader {
            last_offset_delta,
            ..header
        };
        assert_eq!(again.header, expected_header);
        let again_records =
            records(&again, &mut again_scratch).expect("a re-encoded batch's records decode");
        assert_eq!(again_records, decoded);
    }
    if taken < records_field.len() {
        // The walk stopped at an error: the batch there does not decode.
        assert!(RecordBatch::decode(&records_field[taken..]).is_err());
    }
}

/// `data` with the CRC of every batch whose length fits recomputed.
fn with_crcs_fixed(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0;
    while let Some(batch) = out.get_mut(at..) {
        let Some(length) = batch.get(BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4) else {
            break;
        };
        let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        let Some(total) = usize::try_from(length)
            .ok()
            .and_then(|n| n.checked_add(BATCH_LENGTH_BASE_BYTES))
            .filter(|n| (BATCH_HEADER_BYTES..=batch.len()).contains(n))
        else {
            break;
        };
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..total]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        at += total;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    walk(data);
    let fixed = with_crcs_fixed(data);
    if fixed != data {
        walk(&fixed);
    }
});
