//! The `--by-ref` produce load: every value is uploaded to the filer and a
//! 40-byte reference is published in its place (docs/payloads.md), through
//! the client SDK, so the figure is what a user of `Producer::send` with
//! `by_ref_over` gets.
//!
//! Each producer task keeps one upload in flight: uploads are durable before
//! they return, so concurrency comes from `--producers`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use client::{AckMode, Client, ClientOptions, ProducerConfig, Transport};
use hdrhistogram::Histogram;
use tokio::task::JoinSet;

use crate::load::{new_histogram, Progress};

/// Where the payloads go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ByRefPath {
    /// The bench writes them into the broker's filer directory itself.
    Direct,
    /// Through the broker's upload requests.
    Broker,
}

impl ByRefPath {
    pub fn name(self) -> &'static str {
        match self {
            ByRefPath::Direct => "direct",
            ByRefPath::Broker => "broker",
        }
    }
}

/// What one by-reference produce phase is to do.
#[derive(Debug)]
pub struct ByRefPlan {
    pub broker: SocketAddr,
    pub transport: Transport,
    pub tls_ca: Option<PathBuf>,
    /// The broker's filer directory, for [`ByRefPath::Direct`].
    pub payload_dir: Option<PathBuf>,
    pub topic: String,
    pub value_bytes: usize,
    pub ack: AckMode,
    pub producers: u32,
    /// Records to send; `None`: until `deadline`.
    pub records: Option<u64>,
    pub deadline: Option<Instant>,
}

/// Records sent and the latency of each `send` (upload, then batching).
pub async fn produce_by_reference(
    plan: ByRefPlan,
    progress: Arc<Progress>,
) -> Result<(u64, Duration, Histogram<u64>)> {
    let options = ClientOptions {
        tls_ca_file: plan.tls_ca.clone(),
        payload_dir: plan.payload_dir.clone(),
        ..ClientOptions::default()
    };
    let client = Client::connect(&plan.broker.to_string(), plan.transport, options)
        .await
        .context("connect the by-reference producers")?;
    let value: Arc<Vec<u8>> = Arc::new(
        (0..plan.value_bytes)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9) as u8)
            .collect(),
    );
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..plan.producers {
        let producer = client
            .producer(
                &plan.topic,
                ProducerConfig {
                    ack: plan.ack,
                    by_ref_over: Some(0),
                    ..ProducerConfig::default()
                },
            )
            .await?;
        let (next, value, progress) = (next.clone(), value.clone(), progress.clone());
        let (records, deadline) = (plan.records, plan.deadline);
        tasks.spawn(async move {
            let mut latency = new_histogram();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                if records.is_some_and(|r| n >= r) {
                    break;
                }
                let sent = Instant::now();
                producer.send(&n.to_le_bytes(), &value, &[]).await?;
                latency.saturating_record((sent.elapsed().as_micros() as u64).max(1));
                progress.records.fetch_add(1, Ordering::Relaxed);
                progress
                    .bytes
                    .fetch_add(value.len() as u64, Ordering::Relaxed);
            }
            producer.flush().await?;
            anyhow::Ok(latency)
        });
    }
    let mut latency = new_histogram();
    while let Some(joined) = tasks.join_next().await {
        latency.add(&joined??)?;
    }
    let sent = latency.len();
    Ok((sent, start.elapsed(), latency))
}
