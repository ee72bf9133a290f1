//! Subscribe from a point in time: only records stamped at or after it.
//!
//! ```sh
//! cargo run --release -p kelp -- serve                         # a broker on 127.0.0.1:7420
//! cargo run -p kelp-client --example subscribe_from_time       # KELP_BROKER=HOST:PORT for another
//! ```
//!
//! Publishes a batch of "before" records, notes the time, publishes
//! "after" records, then subscribes with `FetchFrom::Timestamp` and checks
//! that exactly the "after" records arrive, each key's in the order they
//! were sent. Exits non-zero on any failure.

mod common;

use std::collections::HashMap;
use std::error::Error;
use std::time::Duration;

use kelp_client::{ClientOptions, FetchFrom, Producer, ProducerConfig, SubscribeOptions};

/// Records published before and after the cut.
const RECORDS: u64 = 200;
/// Keys the records are spread over.
const KEYS: u64 = 8;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit(run().await)
}

async fn run() -> Result<(), Box<dyn Error>> {
    let client = common::connect(ClientOptions::default()).await?;
    let topic = common::topic_name("from-time");
    client.create_topic(&topic, 2).await?;
    let producer = client.producer(&topic, ProducerConfig::default()).await?;

    publish(&producer, "before").await?;
    // Records carry the producer's clock (ms): step past the last "before"
    // millisecond, take the cut, and step past it again.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cut = common::now_ms();
    tokio::time::sleep(Duration::from_millis(5)).await;
    publish(&producer, "after").await?;
    println!("published {RECORDS} records before {cut} ms and {RECORDS} after");

    let mut sub = client
        .subscribe(
            &topic,
            FetchFrom::Timestamp(cut),
            SubscribeOptions::default(),
        )
        .await?;
    let mut next_seq: HashMap<Vec<u8>, u64> = HashMap::new();
    for _ in 0..RECORDS {
        let record = match tokio::time::timeout(Duration::from_secs(30), sub.next()).await {
            Ok(Some(record)) => record?,
            Ok(None) => return Err("the subscription ended early".into()),
            Err(_) => return Err("records stopped arriving".into()),
        };
        let value = String::from_utf8_lossy(&record.value).into_owned();
        let Some(seq) = value.strip_prefix("after #") else {
            return Err(format!("read {value:?}, published before the cut").into());
        };
        if record.timestamp_ms < cut {
            return Err(format!("read a record stamped {} ms", record.timestamp_ms).into());
        }
        // Record `i` is the `i / KEYS`-th of its key.
        let i: u64 = seq.parse()?;
        let expected = next_seq.entry(record.key.to_vec()).or_insert(0);
        if i / KEYS != *expected {
            return Err(format!("{value:?} out of order for its key").into());
        }
        *expected += 1;
    }
    // Nothing more: everything past the cut was read.
    let extra = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
    if let Ok(Some(record)) = extra {
        return Err(format!("an extra record arrived: {:?}", record?).into());
    }
    println!("read {RECORDS} records from timestamp {cut}, none from before it, in key order");

    client.delete_topic(&topic).await?;
    client.close().await;
    Ok(())
}

/// `RECORDS` records `label #i`, key `key-{i % KEYS}`, flushed.
async fn publish(producer: &Producer, label: &str) -> Result<(), Box<dyn Error>> {
    for i in 0..RECORDS {
        let key = format!("key-{}", i % KEYS);
        let value = format!("{label} #{i}");
        producer.send(key.as_bytes(), value.as_bytes(), &[]).await?;
    }
    producer.flush().await?;
    Ok(())
}
