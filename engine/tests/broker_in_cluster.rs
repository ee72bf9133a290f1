//! Two brokers in this process joined to a stand-in control plane (a test
//! thread that speaks the wire protocol), driven by the layouts a control
//! plane sends: a segment is opened where it is placed, sealed and flushed
//! when a layout seals it, read from the filer by a broker that never held
//! it, and that broker says "sealed" only once the owner's seal marker is
//! there. The brokers register, report load and leave.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kelp_engine::{Broker, BrokerConfig};
use wire::chunk::BatchWalk;
use wire::message::{BrokerShards, Fetched, SegmentLoadReport, ShardAddress};
use wire::{
    AckMode, AdminRequest, BatchBuilder, BrokerPortRequest, ControlPortRequest, DataRequest,
    ErrorCode, FetchFrom, LayoutCommand, MembershipRequest, Response,
};

use test_support::{read_frame, TestConn};

const TOPIC: &str = "cluster/t";
const HALF: u64 = 1 << 31;

/// What the stand-in control plane was told.
#[derive(Debug, Default)]
struct Heard {
    registrations: Vec<Option<u32>>,
    reports: Vec<(u32, Vec<SegmentLoadReport>)>,
    leaves: Vec<u32>,
}

/// A control plane that registers brokers (ids 1, 2, ...) into `filer`,
/// takes reports and leaves, and remembers them.
fn stand_in_control(filer: PathBuf) -> (String, Arc<Mutex<Heard>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let heard = Arc::new(Mutex::new(Heard::default()));
    let state = heard.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let state = state.clone();
            let filer = filer.clone();
            std::thread::spawn(move || {
                while let Some((header, payload)) = read_frame(&mut stream) {
                    let request = ControlPortRequest::decode(header.frame_type, &payload).unwrap();
                    let mut heard = state.lock().unwrap();
                    let response = match request {
                        ControlPortRequest::Membership(MembershipRequest::RegisterBroker {
                            id,
                            ..
                        }) => {
                            heard.registrations.push(id);
                            Response::Registered {
                                id: id.unwrap_or(heard.registrations.len() as u32),
                                filer: filer.display().to_string(),
                            }
                        }
                        ControlPortRequest::Membership(MembershipRequest::LoadReport {
                            broker,
                            segments,
                        }) => {
                            heard.reports.push((broker, segments));
                            Response::Done
                        }
                        ControlPortRequest::Membership(MembershipRequest::LeaveBroker {
                            broker,
                        }) => {
                            heard.leaves.push(broker);
                            Response::Done
                        }
                        other => Response::Error {
                            code: ErrorCode::InvalidArgument,
                            message: format!("the stand-in does not answer {other:?}"),
                        },
                    };
                    drop(heard);
                    let mut out = Vec::new();
                    response.encode(header.request_id, &mut out);
                    if stream.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (address, heard)
}

/// A test connection whose answers are decoded (and leaked, so they may
/// borrow their payload for the rest of the test).
struct Conn(TestConn);

impl Conn {
    fn open(port: u16) -> Conn {
        Conn(TestConn::open(port))
    }

    fn call<'a>(&mut self, request: impl Into<BrokerPortRequest<'a>>) -> Response<'static> {
        let (h, p) = self.0.call(request);
        let p: &'static [u8] = Box::leak(p.into_boxed_slice());
        Response::decode(h.frame_type, p).unwrap()
    }

    fn produce(&mut self, segment: u32, key: &str, value: &str) -> Response<'static> {
        let mut b = BatchBuilder::new();
        b.push(1_700_000_000_000, key.as_bytes(), value.as_bytes(), &[])
            .unwrap();
        let batch = b.finish(0, 0).to_vec();
        self.call(DataRequest::Produce {
            topic: TOPIC,
            segment,
            ack: AckMode::Leader,
            batch: &batch,
        })
    }

    /// Every value of a segment from the start, and whether the broker
    /// said the segment is sealed and read to its end.
    fn read_all(&mut self, segment: u32) -> Result<(Vec<String>, bool), ErrorCode> {
        let mut values = Vec::new();
        let mut from = FetchFrom::Earliest;
        loop {
            let response = self.call(DataRequest::Fetch(wire::FetchRequest {
                topic: TOPIC.into(),
                segment,
                from,
                max_bytes: 1 << 16,
                max_wait_ms: 0,
                checks: wire::FetchChecks::Trust,
                follower: None,
            }));
            let Fetched {
                start_offset,
                next_offset,
                high_watermark,
                sealed,
                batches,
                ..
            } = match response {
                Response::Fetched(f) => f,
                Response::Error { code, .. } => return Err(code),
                other => panic!("not a fetch answer: {other:?}"),
            };
            for item in BatchWalk::new(batches) {
                let (_, b) = item.unwrap();
                for r in b.records() {
                    if b.base_offset() + u64::from(r.offset_delta) >= start_offset {
                        values.push(String::from_utf8(r.value.to_vec()).unwrap());
                    }
                }
            }
            if next_offset >= high_watermark {
                return Ok((values, sealed));
            }
            from = FetchFrom::Offset(next_offset);
        }
    }

    fn apply(&mut self, layout: &str) {
        self.apply_with(layout, Vec::new());
    }

    /// Apply `layout`, telling the broker the shards of the other brokers
    /// owning its open segments.
    fn apply_with(&mut self, layout: &str, owners: Vec<BrokerShards>) {
        match self.call(LayoutCommand::ApplyLayout {
            topic_json: layout.as_bytes(),
            owners,
        }) {
            Response::Done => {}
            other => panic!("layout not applied: {other:?}"),
        }
    }
}

fn code(response: &Response<'_>) -> Option<ErrorCode> {
    match response {
        Response::Error { code, .. } => Some(*code),
        Response::Sealed { .. } => Some(ErrorCode::SegmentSealed),
        _ => None,
    }
}

fn segment(id: u32, start: u64, end: u64, open: bool, broker: u32, successors: &str) -> String {
    let state = if open { "open" } else { "sealed" };
    let epoch = u32::from(!open);
    format!(
        r#"{{"id":{id},"epoch":{epoch},"range":{{"start":{start},"end":{end}}},"state":"{state}","shard":0,"successors":[{successors}],"created_ms":1,"broker":{broker}}}"#
    )
}

fn layout(segments: &[String]) -> String {
    format!(
        r#"{{"version":1,"name":"{TOPIC}","created_ms":1,"segments":[{}]}}"#,
        segments.join(",")
    )
}

/// A key whose hash falls in `[start, end)`.
fn key_in(start: u64, end: u64) -> String {
    (0..)
        .map(|i| format!("key{i}"))
        .find(|k| (start..end).contains(&u64::from(wire::key_hash(k.as_bytes()))))
        .unwrap()
}

fn broker(dir: &Path, control: &str) -> (Broker, u16) {
    let port = test_support::free_port_pair();
    let broker = Broker::start(BrokerConfig {
        data_dir: dir.to_path_buf(),
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        shards: 1,
        pin_shards: false,
        // Nothing reaches the filer before a seal flushes it.
        flush_age_ms: 600_000,
        control: Some(control.to_owned()),
        ..BrokerConfig::default()
    })
    .unwrap();
    (broker, port)
}

#[test]
fn layouts_open_seal_and_hand_over_segments_between_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let filer = dir.path().join("shared-filer");
    let (control, heard) = stand_in_control(filer.clone());
    let (a, port_a) = broker(&dir.path().join("a"), &control);
    let (b, port_b) = broker(&dir.path().join("b"), &control);
    assert_eq!(heard.lock().unwrap().registrations, vec![None, None]);
    let (mut to_a, mut to_b) = (Conn::open(port_a), Conn::open(port_b));

    // One segment, on broker 1 (a). Broker 2 (b) learns the layout too.
    let first = layout(&[segment(0, 0, 1 << 32, true, 1, "")]);
    to_a.apply(&first);
    to_b.apply(&first);
    for i in 0..3 {
        let answer = to_a.produce(0, &format!("k{i}"), &format!("v{i}"));
        assert!(matches!(answer, Response::Produced { .. }), "{answer:?}");
    }
    assert_eq!(code(&to_b.produce(0, "k", "v")), Some(ErrorCode::NotOwner));

    // Segment 0 split into 1 (on a) and 2 (on b). Broker b hears first:
    // it may read segment 0 from the filer, but a has not flushed it, so b
    // must not call it sealed yet.
    let split = layout(&[
        segment(0, 0, 1 << 32, false, 1, "1,2"),
        segment(1, 0, HALF, true, 1, ""),
        segment(2, HALF, 1 << 32, true, 2, ""),
    ]);
    to_b.apply(&split);
    let (values, sealed) = to_b.read_all(0).unwrap();
    assert!(!sealed, "sealed before the owner flushed: {values:?}");
    assert!(values.is_empty());

    // Broker a seals: flushes, marks, refuses writes, naming where the
    // range went (1 on itself, 2 on b, told with the layout) so producers
    // need not ask the control plane.
    let b_shards = ShardAddress {
        tcp: format!("127.0.0.1:{port_b}"),
        quic: format!("127.0.0.1:{}", port_b + 1),
    };
    to_a.apply_with(
        &split,
        vec![BrokerShards {
            broker: 2,
            shards: vec![b_shards.clone()],
        }],
    );
    assert!(filer.join("topics/cluster/t/0/sealed").exists());
    match to_a.produce(0, "k", "v") {
        Response::Sealed { successors, .. } => {
            assert_eq!(successors.layout_version, 2, "{successors:?}");
            let named: Vec<(u32, Option<u32>, u32, u64)> = successors
                .segments
                .iter()
                .map(|s| (s.id, s.broker, s.start, s.end))
                .collect();
            assert_eq!(
                named,
                vec![(1, Some(1), 0, HALF), (2, Some(2), HALF as u32, 1 << 32)]
            );
            let own = successors.segments[0].address.as_ref().unwrap();
            assert!(own.tcp.ends_with(&format!(":{port_a}")), "{own:?}");
            assert_eq!(successors.segments[1].address.as_ref(), Some(&b_shards));
        }
        other => panic!("a write to a sealed segment got {other:?}"),
    }
    let all = vec!["v0".to_owned(), "v1".to_owned(), "v2".to_owned()];
    assert_eq!(to_a.read_all(0).unwrap(), (all.clone(), true));
    assert_eq!(to_b.read_all(0).unwrap(), (all, true));

    // The successors take writes where they are placed, nowhere else.
    let (low, high) = (key_in(0, HALF), key_in(HALF, 1 << 32));
    assert!(matches!(
        to_b.produce(2, &high, "x"),
        Response::Produced { .. }
    ));
    assert_eq!(
        code(&to_b.produce(2, &low, "x")),
        Some(ErrorCode::KeyOutOfRange)
    );
    assert!(matches!(
        to_a.produce(1, &low, "y"),
        Response::Produced { .. }
    ));
    assert_eq!(
        code(&to_a.produce(2, &high, "y")),
        Some(ErrorCode::NotOwner)
    );

    // An older layout arriving late changes nothing.
    to_a.apply(&first);
    assert!(matches!(
        to_a.produce(1, &low, "z"),
        Response::Produced { .. }
    ));
    assert_eq!(
        code(&to_a.produce(0, "k", "v")),
        Some(ErrorCode::SegmentSealed)
    );

    // Load reports name each open segment with its offsets.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reported = heard
            .lock()
            .unwrap()
            .reports
            .iter()
            .any(|(broker, segments)| {
                *broker == 1
                    && segments
                        .iter()
                        .any(|s| s.topic == TOPIC && s.segment == 1 && s.next_offset == 2)
            });
        if reported {
            break;
        }
        assert!(Instant::now() < deadline, "no load report for segment 1");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A sealed segment is not reported: it takes no load.
    let last_a = heard
        .lock()
        .unwrap()
        .reports
        .iter()
        .rev()
        .find(|(broker, _)| *broker == 1)
        .map(|(_, s)| s.iter().map(|s| s.segment).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(last_a, vec![1]);

    // Admin requests go to the control plane, which answers them.
    assert_eq!(
        code(&to_a.call(AdminRequest::ListBrokers)),
        Some(ErrorCode::InvalidArgument)
    );

    drop(to_a);
    a.stop().unwrap();
    assert_eq!(heard.lock().unwrap().leaves, vec![1]);
    // A restarted broker keeps its id.
    let (a, _) = broker(&dir.path().join("a"), &control);
    assert_eq!(
        heard.lock().unwrap().registrations,
        vec![None, None, Some(1)]
    );
    a.stop().unwrap();
    drop(to_b);
    b.stop().unwrap();
}
