//! What the connection-flood tests of the broker and the control plane
//! share: a small request that must get through, and the per-address
//! connection limit checked the same way on either process.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wire::{AdminRequest, ErrorCode, Response};

use super::{connect_from, rss_mib};

/// A ListTopics round trip on `stream`: whether it was answered with the
/// topic list.
pub fn lists_topics(stream: &mut TcpStream) -> bool {
    let mut out = Vec::new();
    AdminRequest::ListTopics.encode(9, &mut out);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    if stream.write_all(&out).is_err() {
        return false;
    }
    match test_support::read_frame(stream) {
        Some(frame) => matches!(test_support::decode(&frame), Response::TopicList { .. }),
        None => false,
    }
}

/// With `--connections-per-ip-max 4` on whatever listens on `port`: four
/// connections from 127.0.0.2 are served, the fifth is answered `Busy`
/// and closed, 127.0.0.3 is still served, and a slot freed is taken again.
pub fn one_address_cannot_take_every_connection(port: u16) {
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect_from("127.0.0.2", port)).collect();
    for s in &mut held {
        assert!(lists_topics(s), "a connection within the limit was refused");
    }
    let mut refused = connect_from("127.0.0.2", port);
    refused
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let frame = test_support::read_frame(&mut refused).expect("a Busy answer");
    assert!(
        matches!(
            test_support::decode(&frame),
            Response::Error {
                code: ErrorCode::Busy,
                ..
            }
        ),
        "{frame:?}"
    );
    let mut rest = Vec::new();
    assert_eq!(refused.read_to_end(&mut rest).unwrap_or(0), 0, "closed");
    let mut other = connect_from("127.0.0.3", port);
    assert!(lists_topics(&mut other), "another address was held back");
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut again = connect_from("127.0.0.2", port);
    assert!(lists_topics(&mut again), "a freed slot was not given back");
}

/// Waits up to 10 s for process `pid`'s resident memory to come back to
/// `ceiling_mib` or below once flooding connections closed, and fails if
/// it does not; returns it.
pub fn rss_comes_back(pid: u32, ceiling_mib: u64, who: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = rss_mib(pid);
    while after > ceiling_mib && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        after = rss_mib(pid);
    }
    println!("{who} RSS after the connections closed: {after} MiB");
    assert!(
        after <= ceiling_mib,
        "{who} RSS stayed at {after} MiB after the connections closed (at most {ceiling_mib})"
    );
    after
}
