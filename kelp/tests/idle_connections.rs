//! A broker closes connections that stay idle past `--idle-timeout-ms`
//! (issue 16: idle connections must not hold the connection limit), and
//! the SDK's clients carry on over that: a producer and an admin client
//! that were idle longer than the timeout send again, with nothing lost
//! or doubled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use client::{AckMode, ProducerConfig};

mod support;

use support::{port, Broker};

/// The broker's idle timeout in this test.
const IDLE_MS: u64 = 200;
/// Records per round, and rounds with an idle pause before each.
const RECORDS: u64 = 50;
const ROUNDS: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_carry_on_after_the_broker_closes_their_idle_connections() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_with(
        dir.path(),
        port(),
        &["--idle-timeout-ms", &IDLE_MS.to_string()],
    );
    let client = broker.client().await;
    let topic = "idle/producer";
    client.create_topic(topic, 2).await.unwrap();
    let producer = client
        .producer(
            topic,
            ProducerConfig {
                ack: AckMode::Leader,
                ..ProducerConfig::default()
            },
        )
        .await
        .unwrap();
    // A raw connection left silent is closed by the broker (the clients
    // below meet the same), well within a bound far past the timeout.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", broker.port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut raw, &mut byte).unwrap(),
        0,
        "the broker kept an idle connection open"
    );
    let mut acknowledged = 0;
    for round in 0..ROUNDS {
        // Idle for several timeouts: the broker closes every connection.
        tokio::time::sleep(Duration::from_millis(IDLE_MS * 4)).await;
        for i in 0..RECORDS {
            let key = format!("k{}", round * RECORDS + i);
            producer.send(key.as_bytes(), b"v", &[]).await.unwrap();
        }
        // Acknowledged so far, over all rounds.
        acknowledged = producer.flush().await.unwrap();
        assert_eq!(acknowledged, (round + 1) * RECORDS, "round {round}");
        // The admin path too.
        let info = client.describe_topic(topic).await.unwrap();
        let stored: u64 = info.segments.iter().map(|s| s.next_offset).sum();
        assert_eq!(stored, (round + 1) * RECORDS, "round {round}");
    }
    assert_eq!(acknowledged, ROUNDS * RECORDS);
    let mut subscriber = support::keyed::subscribe_earliest(&client, topic).await;
    let mut keys = std::collections::HashSet::new();
    while (keys.len() as u64) < ROUNDS * RECORDS {
        let record = tokio::time::timeout(Duration::from_secs(30), subscriber.next())
            .await
            .expect("records stopped coming")
            .expect("the subscription ended")
            .unwrap();
        assert!(keys.insert(record.key.clone()), "{:?} twice", record.key);
    }
    drop(subscriber);
    client.close().await;
    broker.stop();
}
