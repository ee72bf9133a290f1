//! kelp_kafka::Request::decode over arbitrary bytes, as the gateway reads a
//! frame after its size prefix; frame_size over the same bytes as a prefix.
//! A decoded request re-encodes to a frame whose prefix frame_size reads
//! back and which decodes to the same request, and encodes again to the
//! same bytes. A Produce request's record batches are walked as the gateway
//! walks them (kafka_record_batch goes into the records).
#![no_main]

use kelp_kafka::request::{FRAME_PREFIX_BYTES, REQUEST_FRAME_BYTES_MAX};
use kelp_kafka::{frame_size, ApiKey, RecordBatches, Request, RequestBody};
use libfuzzer_sys::fuzz_target;

fn check_frame_size(data: &[u8], max_bytes: usize) {
    let size = frame_size(data, max_bytes);
    let Some(prefix) = data.first_chunk::<FRAME_PREFIX_BYTES>() else {
        assert_eq!(size, Ok(None));
        return;
    };
    let stated = i64::from(i32::from_be_bytes(*prefix));
    match size {
        Ok(Some(n)) => assert!(n as i64 == stated && n <= max_bytes),
        Ok(None) => panic!("a complete prefix reads as incomplete"),
        Err(_) => assert!(stated < 0 || stated > max_bytes as i64),
    }
}

fuzz_target!(|data: &[u8]| {
    check_frame_size(data, REQUEST_FRAME_BYTES_MAX);
    check_frame_size(data, data.len());

    let Ok(request) = Request::decode(data) else {
        return;
    };
    let api_key = request.body.api_key();
    assert_eq!(ApiKey::from_code(request.header.api_key), Some(api_key));
    assert!(api_key.supports(request.header.api_version));

    let mut frame = Vec::new();
    request
        .encode_frame(&mut frame)
        .expect("a decoded request encodes");
    let size = frame_size(&frame, REQUEST_FRAME_BYTES_MAX)
        .expect("an encoded frame's prefix is valid")
        .expect("an encoded frame has a prefix");
    assert_eq!(size, frame.len() - FRAME_PREFIX_BYTES);
    let again = Request::decode(&frame[FRAME_PREFIX_BYTES..]).unwrap_or_else(|e| {
        panic!("a re-encoded {api_key:?} request does not decode: {e}\n{request:?}")
    });
    assert_eq!(again, request);
    let mut frame_again = Vec::new();
    again
        .encode_frame(&mut frame_again)
        .expect("a decoded request encodes");
    assert_eq!(frame_again, frame, "encoding is not canonical");

    if let RequestBody::Produce(produce) = &request.body {
        let records = produce
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter_map(|p| p.records);
        for records in records {
            let mut taken = 0;
            for batch in RecordBatches::new(records) {
                let Ok(batch) = batch else {
                    break;
                };
                assert_eq!(batch.bytes, &records[taken..taken + batch.bytes.len()]);
                taken += batch.bytes.len();
            }
        }
    }
});
