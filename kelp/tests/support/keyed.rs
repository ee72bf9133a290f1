//! Keyed records whose values say `key:sequence`, for the tests that check
//! every acknowledged record is read exactly once and each key in the
//! order it was published, across splits, merges, moves and failures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Bytes per segment per second the split tests' scaling policy aims at;
/// their load, `RECORDS_PER_STEP` records of ~120 bytes every `STEP`,
/// sends about 20 times this.
pub const TARGET_BYTES_PER_S: u64 = 25_000;
pub const RECORDS_PER_STEP: u64 = 40;
pub const STEP: Duration = Duration::from_millis(10);

/// A scaling policy that reacts within seconds (windows of 1-8 s, a 2 s
/// cooldown, splits in two) aiming at `TARGET_BYTES_PER_S`, between one
/// and `segments_max` open segments.
pub fn quick_policy(segments_max: u32) -> String {
    format!(
        r#"{{"target":{{"bytes_per_s":{TARGET_BYTES_PER_S}}},"windows_ms":[1000,2000,4000,8000],"cooldown_ms":2000,"segments_min":1,"segments_max":{segments_max},"split_pieces_max":2}}"#
    )
}

/// Publishes keyed records whose values are `key:sequence` (about 120
/// bytes each) over `keys` keys in turn; counts what it sent so the reader
/// knows what to expect.
pub struct Publisher {
    pub producer: client::Producer,
    /// The next sequence of each key (how many it was sent).
    pub next_seq: HashMap<u64, u64>,
    /// Records sent by this publisher.
    pub sent: u64,
    turn: u64,
    keys: u64,
}

impl Publisher {
    pub fn new(producer: client::Producer, keys: u64) -> Publisher {
        Publisher {
            producer,
            next_seq: HashMap::new(),
            sent: 0,
            turn: 0,
            keys,
        }
    }

    /// A publisher on `producer` that goes on with each key's sequence
    /// where `before` left it.
    pub fn after(producer: client::Producer, before: &Publisher) -> Publisher {
        Publisher {
            producer,
            next_seq: before.next_seq.clone(),
            sent: 0,
            turn: before.turn,
            keys: before.keys,
        }
    }

    /// A publisher of `topic` over `keys` keys through a durable producer
    /// that lingers 5 ms (batches of a steady trickle, each acknowledged
    /// once in the filer).
    pub async fn durable(client: &client::Client, topic: &str, keys: u64) -> Publisher {
        Publisher::new(lingering_durable(client, topic).await, keys)
    }

    /// Like [`Publisher::durable`], going on with each key's sequence
    /// where `before` left it.
    pub async fn durable_after(
        client: &client::Client,
        topic: &str,
        before: &Publisher,
    ) -> Publisher {
        Publisher::after(lingering_durable(client, topic).await, before)
    }

    /// Flushes the producer and checks that every record sent was
    /// acknowledged; returns how many were sent.
    pub async fn finish(&mut self) -> u64 {
        self.producer
            .flush()
            .await
            .expect("every record acknowledged");
        assert_eq!(self.producer.acked_records(), self.sent);
        self.sent
    }

    /// Send `n` records, each key in turn.
    pub async fn send(&mut self, n: u64) {
        for _ in 0..n {
            self.send_one().await;
        }
    }

    /// Send `n` records, then pause for one `STEP`: one step of the load.
    pub async fn step(&mut self, n: u64) {
        self.send(n).await;
        tokio::time::sleep(STEP).await;
    }

    async fn send_one(&mut self) {
        let k = self.turn % self.keys;
        self.turn += 1;
        let seq = self.next_seq.entry(k).or_insert(0);
        let key = key_name(k);
        let value = format!("{key}:{:010}:{}", *seq, "x".repeat(90));
        *seq += 1;
        self.producer
            .send(key.as_bytes(), value.as_bytes(), &[])
            .await
            .expect("send");
        self.sent += 1;
    }
}

/// Creates `topic` with one segment and the [`quick_policy`] up to
/// `segments_max` segments; returns the layout it was created with.
pub async fn create_hot_topic(
    client: &client::Client,
    topic: &str,
    segments_max: u32,
) -> client::TopicInfo {
    let created = client.create_topic(topic, 1).await.expect("create");
    client
        .set_policy(topic, &quick_policy(segments_max))
        .await
        .expect("set the policy");
    created
}

/// A subscriber to `topic` from its first record.
pub async fn subscribe_earliest(client: &client::Client, topic: &str) -> client::Subscriber {
    client
        .subscribe(
            topic,
            client::FetchFrom::Earliest,
            client::SubscribeOptions::default(),
        )
        .await
        .expect("subscribe")
}

/// A durable producer of `topic` that lingers 5 ms.
async fn lingering_durable(client: &client::Client, topic: &str) -> client::Producer {
    let config = client::ProducerConfig {
        linger_ms: 5,
        ..super::durable()
    };
    client.producer(topic, config).await.expect("a producer")
}

/// Publish load steps, looking at `topic`'s layout every 250 ms, until
/// `done` finds what it waits for in one; panics after `limit`, naming
/// `what` and the last layout (or error) seen. Prints how long it took.
pub async fn publish_until<T>(
    publisher: &mut Publisher,
    client: &client::Client,
    topic: &str,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&client::TopicInfo) -> Option<T>,
) -> T {
    let started = Instant::now();
    let mut last_look = Instant::now();
    let mut last = String::from("no layout yet");
    loop {
        assert!(
            started.elapsed() < limit,
            "{what}: not within {limit:?}; last seen: {last}"
        );
        publisher.step(RECORDS_PER_STEP).await;
        if last_look.elapsed() < Duration::from_millis(250) {
            continue;
        }
        last_look = Instant::now();
        match client.describe_topic(topic).await {
            Ok(info) => {
                if let Some(found) = done(&info) {
                    eprintln!(
                        "{what}: after {:?}, {} records sent",
                        started.elapsed(),
                        publisher.sent
                    );
                    return found;
                }
                last = format!("{info:?}");
            }
            // The control plane may be away for a while; keep going.
            Err(e) => last = format!("describe failed: {e}"),
        }
    }
}

/// Key `k`'s name.
pub fn key_name(k: u64) -> String {
    format!("key-{k:03}")
}

/// A record's `(key, sequence)`, checking its key and value agree.
pub fn parse(record: &client::OwnedRecord) -> (String, u64) {
    let value = std::str::from_utf8(&record.value).expect("a UTF-8 value");
    let mut parts = value.split(':');
    let key = parts.next().expect("a key").to_owned();
    let seq: u64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .expect("a sequence");
    assert_eq!(
        record.key.as_ref(),
        key.as_bytes(),
        "record key and value agree"
    );
    (key, seq)
}

/// Read until `want` records arrived (and a moment more, to catch any read
/// twice), or `limit` passed; returns `(key, sequence)` pairs.
pub async fn read_records(
    subscriber: &mut client::Subscriber,
    want: u64,
    limit: Duration,
) -> Vec<(String, u64)> {
    read_records_while_moving(subscriber, want, limit, limit).await
}

/// How often a long read prints how far it got.
const READ_PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Like [`read_records`], but gives up early when no record arrived for
/// `quiet` (a reader that is stuck, not slow), and prints its progress
/// every `READ_PROGRESS_EVERY`, so a long read shows which it was.
pub async fn read_records_while_moving(
    subscriber: &mut client::Subscriber,
    want: u64,
    quiet: Duration,
    limit: Duration,
) -> Vec<(String, u64)> {
    let started = Instant::now();
    let deadline = started + limit;
    let mut got = Vec::new();
    let mut complete_at: Option<Instant> = None;
    let mut last_record = started;
    let mut next_progress = started + READ_PROGRESS_EVERY;
    while Instant::now() < deadline
        && last_record.elapsed() < quiet
        && complete_at.is_none_or(|t| t.elapsed() < Duration::from_secs(1))
    {
        if complete_at.is_none() && got.len() as u64 >= want {
            complete_at = Some(Instant::now());
        }
        if Instant::now() >= next_progress {
            next_progress += READ_PROGRESS_EVERY;
            let secs = started.elapsed().as_secs_f64();
            println!(
                "read {} of {want} records in {secs:.0} s ({:.0} a second)",
                got.len(),
                got.len() as f64 / secs
            );
        }
        let Ok(next) = tokio::time::timeout(Duration::from_millis(200), subscriber.next()).await
        else {
            continue;
        };
        let record = next.expect("the subscriber ended").expect("read a record");
        got.push(parse(&record));
        last_record = Instant::now();
    }
    got
}

/// `got` (key, sequence) pairs, grouped by key: each key's sequences are
/// 0, 1, 2, ... (in order, none missing, none twice), and there are
/// `acknowledged` records in all.
pub fn each_key_once_in_order(
    got: Vec<(String, u64)>,
    acknowledged: u64,
) -> HashMap<String, Vec<u64>> {
    let mut per_key: HashMap<String, Vec<u64>> = HashMap::new();
    for (key, seq) in got {
        per_key.entry(key).or_default().push(seq);
    }
    for (key, seqs) in &per_key {
        let expected: Vec<u64> = (0..seqs.len() as u64).collect();
        assert_eq!(
            seqs, &expected,
            "key {key}: records out of order, missing or read twice"
        );
    }
    let read: u64 = per_key.values().map(|s| s.len() as u64).sum();
    assert_eq!(
        read, acknowledged,
        "records read against records acknowledged"
    );
    per_key
}
