//! Produce with each ack mode, then read every record back.
//!
//! ```sh
//! cargo run --release -p kelp -- serve                  # a broker on 127.0.0.1:7420
//! cargo run -p kelp-client --example produce            # KELP_BROKER=HOST:PORT for another
//! ```
//!
//! Creates a topic `examples/produce-<ms>` of 4 segments, publishes
//! `RECORDS` records with ack `None`, `Leader` and `Durable` in turn, reads
//! all of them back from the earliest offset, and deletes the topic. Exits
//! non-zero on any failure.

mod common;

use std::error::Error;
use std::time::Duration;

use kelp_client::{AckMode, ClientOptions, FetchFrom, ProducerConfig, SubscribeOptions};

/// Records published per ack mode.
const RECORDS: u64 = 1_000;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit(run().await)
}

async fn run() -> Result<(), Box<dyn Error>> {
    let client = common::connect(ClientOptions::default()).await?;
    println!(
        "connected to {} ({} shards)",
        common::broker(),
        client.shard_addresses().len()
    );

    let topic = common::topic_name("produce");
    let info = client.create_topic(&topic, 4).await?;
    println!("created {topic} with {} segments", info.segments.len());

    for ack in [AckMode::None, AckMode::Leader, AckMode::Durable] {
        let config = ProducerConfig {
            ack,
            ..ProducerConfig::default()
        };
        let producer = client.producer(&topic, config).await?;
        for i in 0..RECORDS {
            let key = format!("user-{}", i % 10);
            let value = format!("{ack:?} #{i}");
            producer.send(key.as_bytes(), value.as_bytes(), &[]).await?;
        }
        // With `None`, flush counts records sent and confirms the broker
        // handled them; otherwise it counts the acknowledged ones.
        let acked = producer.flush().await?;
        if acked != RECORDS {
            return Err(format!("ack {ack:?}: {acked} of {RECORDS} records acknowledged").into());
        }
        match ack {
            AckMode::None => println!("ack None: sent {acked} records, all handled"),
            _ => println!("ack {ack:?}: acknowledged {acked} records"),
        }
    }

    let expected = 3 * RECORDS;
    let mut sub = client
        .subscribe(&topic, FetchFrom::Earliest, SubscribeOptions::default())
        .await?;
    let mut read = 0u64;
    while read < expected {
        let next = tokio::time::timeout(Duration::from_secs(30), sub.next()).await;
        match next {
            Ok(Some(record)) => {
                record?;
                read += 1;
            }
            Ok(None) => return Err("the subscription ended early".into()),
            Err(_) => return Err(format!("only {read} of {expected} records arrived").into()),
        }
    }
    println!("read back {read} records from earliest");

    client.delete_topic(&topic).await?;
    client.close().await;
    Ok(())
}
