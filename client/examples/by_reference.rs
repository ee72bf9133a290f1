//! Pass large values by reference: the bytes go to the filer, only a
//! 40-byte reference goes through the topic (docs/payloads.md).
//!
//! ```sh
//! cargo run --release -p kelp -- serve                  # a broker on 127.0.0.1:7420
//! cargo run -p kelp-client --example by_reference       # through the broker
//! KELP_PAYLOAD_DIR=kelp-data/filer \
//!   cargo run -p kelp-client --example by_reference     # straight to the broker's filer
//! ```
//!
//! `KELP_BROKER=HOST:PORT` picks another broker. Publishes one small value
//! inline, one large value that the producer uploads on its own (it is
//! over `by_ref_over`), and one uploaded explicitly; reads them back with
//! references resolved, then once more with references left as they are.
//! Exits non-zero on any failure.

mod common;

use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use kelp_client::{
    ClientOptions, FetchFrom, OwnedRecord, ProducerConfig, SubscribeOptions, Subscriber,
    ValueSource,
};

/// Values longer than this go by reference.
const BY_REF_OVER: usize = 64 * 1024;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit(run().await)
}

async fn run() -> Result<(), Box<dyn Error>> {
    let payload_dir = std::env::var_os("KELP_PAYLOAD_DIR").map(PathBuf::from);
    match &payload_dir {
        Some(dir) => println!("payloads go straight to {}", dir.display()),
        None => println!("payloads go through the broker"),
    }
    let options = ClientOptions {
        payload_dir,
        ..ClientOptions::default()
    };
    let client = common::connect(options).await?;
    let topic = common::topic_name("by-ref");
    client.create_topic(&topic, 1).await?;

    let small = b"a small value".to_vec();
    let large = pattern(4 << 20, 7); // 4 MiB
    let explicit = pattern(100_000, 13);

    let config = ProducerConfig {
        by_ref_over: Some(BY_REF_OVER),
        ..ProducerConfig::default()
    };
    let producer = client.producer(&topic, config).await?;
    producer.send(b"small", &small, &[]).await?; // inline
    producer.send(b"large", &large, &[]).await?; // uploaded, then sent as a reference
    let reference = client.upload_payload(&topic, &explicit).await?;
    producer
        .send_reference(b"explicit", &reference, &[])
        .await?;
    let acked = producer.flush().await?;
    println!("published {acked} records: 1 inline, 2 by reference");

    // References resolved (the default): values come back whole, verified
    // against the length and CRC-32C their reference names.
    let mut sub = client
        .subscribe(&topic, FetchFrom::Earliest, SubscribeOptions::default())
        .await?;
    for (key, value) in [
        (&b"small"[..], &small),
        (b"large", &large),
        (b"explicit", &explicit),
    ] {
        let record = next(&mut sub).await?;
        if record.key != key || record.value != value[..] {
            return Err(format!("record {} is not what was sent", record.offset).into());
        }
        match record.source {
            ValueSource::Inline => {
                println!("offset {}: {} bytes inline", record.offset, value.len())
            }
            ValueSource::Resolved(r) => println!(
                "offset {}: {} bytes resolved from {r}",
                record.offset,
                value.len()
            ),
            ValueSource::Reference(r) => return Err(format!("{r} was not resolved").into()),
        }
    }

    // References as they are: the value is the 40-byte reference; read
    // the payload when (and if) it is wanted.
    let options = SubscribeOptions {
        resolve_references: false,
        ..SubscribeOptions::default()
    };
    let mut sub = client
        .subscribe(&topic, FetchFrom::Offset(1), options)
        .await?;
    let record = next(&mut sub).await?;
    let ValueSource::Reference(r) = record.source else {
        return Err("offset 1 should carry a reference".into());
    };
    let payload = client.read_payload(&topic, &r).await?;
    if payload != large[..] {
        return Err(format!("{r} read back different bytes").into());
    }
    println!(
        "offset 1: a {}-byte reference, read on demand: {} bytes",
        record.value.len(),
        payload.len()
    );

    client.delete_topic(&topic).await?;
    client.close().await;
    Ok(())
}

/// The next record, within 30 s.
async fn next(sub: &mut Subscriber) -> Result<OwnedRecord, Box<dyn Error>> {
    match tokio::time::timeout(Duration::from_secs(30), sub.next()).await {
        Ok(Some(record)) => Ok(record?),
        Ok(None) => Err("the subscription ended early".into()),
        Err(_) => Err("no record within 30 s".into()),
    }
}

/// `len` bytes that are not all alike.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
