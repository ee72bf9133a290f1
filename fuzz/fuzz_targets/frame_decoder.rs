//! wire::FrameDecoder over arbitrary bytes cut at arbitrary places: the
//! first byte picks the size of every piece the bytes are handed over in,
//! the rest is the stream. The decoder never panics, never takes bytes
//! past a frame it has not been given room for, and the frames it returns
//! re-encode to exactly the bytes it consumed.
#![no_main]

use kelp_wire::FrameDecoder;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(cut % 64) + 1;
    let mut decoder = FrameDecoder::new();
    let mut consumed = 0;
    let mut rebuilt = Vec::new();
    'stream: for mut chunk in stream.chunks(piece) {
        while !chunk.is_empty() {
            if decoder.room_needed().is_some() {
                if let Some(frame) = decoder.admit() {
                    rebuilt.extend_from_slice(&frame.header.encode());
                    rebuilt.extend_from_slice(&frame.payload);
                }
                continue;
            }
            let before = chunk.len();
            let decoded = decoder.push(&mut chunk);
            consumed += before - chunk.len();
            match decoded {
                Ok(Some(frame)) => {
                    rebuilt.extend_from_slice(&frame.header.encode());
                    rebuilt.extend_from_slice(&frame.payload);
                }
                Ok(None) => {}
                // A bad header ends the stream; nothing more is taken.
                Err(_) => {
                    let mut rest = chunk;
                    assert!(decoder.push(&mut rest).is_err());
                    assert_eq!(rest.len(), chunk.len());
                    break 'stream;
                }
            }
        }
    }
    if let Some(frame) = decoder.admit() {
        rebuilt.extend_from_slice(&frame.header.encode());
        rebuilt.extend_from_slice(&frame.payload);
    }
    assert!(rebuilt.len() <= consumed);
    assert_eq!(rebuilt, stream[..rebuilt.len()]);
    if decoder.at_boundary() {
        assert_eq!(rebuilt.len(), consumed);
    }
});
