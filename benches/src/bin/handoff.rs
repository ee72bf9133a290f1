//! What a cross-thread hand-off into a shard costs with the channel crate
//! kelp uses, next to crossbeam's channel, measured in the same run.
//!
//! A shard is a glommio executor: when it has nothing to do it parks in
//! io_uring, and a message from another thread (the Kafka gateway's
//! `ShardRequest`, the control plane's `ShardCommand`, a filer lane's
//! answer) must wake it. flume's `recv_async` registers the shard task's
//! waker, so a send wakes the parked executor. crossbeam's channel has no
//! async receive: a shard can only poll it, either spinning (yield to the
//! executor, try again) or sleeping on a glommio timer between tries. This
//! program measures the three, for a stream of messages into one shard and
//! for request/response round trips with a reply channel per request (the
//! gateway's pattern), and reports throughput, the shard thread's CPU and
//! round-trip latency. The result decides the channel crate
//! (`docs/broker.md`, "Threads and channels").
//!
//! `target/release/handoff [--messages N] [--round-trips N] [--poll-micros U]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use clap::Parser;
use crossbeam::channel as cb;
use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use kelp_benches::baseline::cpu_time;

#[derive(Parser, Debug)]
struct Args {
    /// Messages in the one-way stream.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Request/response round trips.
    #[arg(long, default_value_t = 20_000)]
    round_trips: u64,
    /// Sleep between polls of an empty crossbeam channel, microseconds.
    #[arg(long, default_value_t = 50)]
    poll_micros: u64,
    /// Channel capacity (the broker's `inbox_requests_max` default).
    #[arg(long, default_value_t = 1024)]
    capacity: usize,
}

/// A message the size of a small `ShardRequest` (64 bytes of fields) with
/// an optional reply channel.
struct Message {
    fields: [u64; 8],
    reply: Option<ReplyTx>,
}

enum ReplyTx {
    Flume(flume::Sender<u64>),
    Crossbeam(cb::Sender<u64>),
}

/// How the shard receives.
#[derive(Clone, Copy, Debug)]
enum Receive {
    /// flume's `recv_async`: the send wakes the parked shard.
    Flume,
    /// crossbeam `try_recv`, yielding to the executor between tries.
    CrossbeamSpin,
    /// crossbeam `try_recv`, sleeping on a glommio timer between tries.
    CrossbeamSleep(Duration),
}

impl Receive {
    fn name(self) -> String {
        match self {
            Receive::Flume => "flume recv_async (kelp)".into(),
            Receive::CrossbeamSpin => "crossbeam try_recv + yield".into(),
            Receive::CrossbeamSleep(d) => {
                format!("crossbeam try_recv + sleep {} us", d.as_micros())
            }
        }
    }
}

enum Inbox {
    Flume(flume::Receiver<Message>),
    Crossbeam(cb::Receiver<Message>, Receive),
}

enum Sender {
    Flume(flume::Sender<Message>),
    Crossbeam(cb::Sender<Message>),
}

impl Inbox {
    async fn recv(&self) -> Option<Message> {
        match self {
            Inbox::Flume(rx) => rx.recv_async().await.ok(),
            Inbox::Crossbeam(rx, how) => loop {
                match rx.try_recv() {
                    Ok(m) => return Some(m),
                    Err(cb::TryRecvError::Disconnected) => return None,
                    Err(cb::TryRecvError::Empty) => match how {
                        Receive::CrossbeamSleep(d) => glommio::timer::sleep(*d).await,
                        _ => futures_lite::future::yield_now().await,
                    },
                }
            },
        }
    }
}

impl Sender {
    fn send(&self, m: Message) -> Result<()> {
        match self {
            Sender::Flume(tx) => tx.send(m).map_err(|_| anyhow!("shard gone")),
            Sender::Crossbeam(tx) => tx.send(m).map_err(|_| anyhow!("shard gone")),
        }
    }
}

fn channel(how: Receive, capacity: usize) -> (Sender, Inbox) {
    match how {
        Receive::Flume => {
            let (tx, rx) = flume::bounded(capacity);
            (Sender::Flume(tx), Inbox::Flume(rx))
        }
        _ => {
            let (tx, rx) = cb::bounded(capacity);
            (Sender::Crossbeam(tx), Inbox::Crossbeam(rx, how))
        }
    }
}

/// What one run measured.
struct Run {
    elapsed: Duration,
    shard_cpu: Duration,
    latency: Histogram<u64>,
}

/// Runs a shard that answers every message (replying when asked) until
/// its inbox closes, and a driver on this thread that sends `expected`
/// messages; fails unless the shard received them all.
fn run(
    how: Receive,
    capacity: usize,
    expected: u64,
    drive: impl FnOnce(&Sender) -> Result<Histogram<u64>>,
) -> Result<Run> {
    let (tx, inbox) = channel(how, capacity);
    let shard = LocalExecutorBuilder::new(Placement::Unbound)
        .name("handoff-shard")
        .io_memory(1 << 20)
        .ring_depth(2048)
        .spawn(move || async move {
            let before = cpu_time(libc::RUSAGE_THREAD);
            let mut sum = 0u64;
            let mut received = 0u64;
            while let Some(m) = inbox.recv().await {
                received += 1;
                sum = sum.wrapping_add(m.fields[0]);
                match m.reply {
                    Some(ReplyTx::Flume(r)) => drop(r.send(sum)),
                    Some(ReplyTx::Crossbeam(r)) => drop(r.send(sum)),
                    None => {}
                }
            }
            black_box(sum);
            (received, cpu_time(libc::RUSAGE_THREAD) - before)
        })
        .map_err(|e| anyhow!("starting the shard: {e}"))?;
    let start = Instant::now();
    let latency = drive(&tx)?;
    drop(tx);
    let (received, shard_cpu) = shard.join().map_err(|e| anyhow!("shard: {e}"))?;
    if received != expected {
        return Err(anyhow!(
            "{}: sent {expected} messages, the shard got {received}",
            how.name()
        ));
    }
    Ok(Run {
        elapsed: start.elapsed(),
        shard_cpu,
        latency,
    })
}

fn one_way(sender: &Sender, messages: u64) -> Result<Histogram<u64>> {
    for i in 0..messages {
        sender.send(Message {
            fields: [i; 8],
            reply: None,
        })?;
    }
    Ok(Histogram::new(3)?)
}

fn round_trips(sender: &Sender, how: Receive, count: u64) -> Result<Histogram<u64>> {
    let mut latency = Histogram::<u64>::new(3)?;
    for i in 0..count {
        let start = Instant::now();
        match how {
            Receive::Flume => {
                let (reply, answer) = flume::bounded(1);
                sender.send(Message {
                    fields: [i; 8],
                    reply: Some(ReplyTx::Flume(reply)),
                })?;
                answer.recv()?;
            }
            _ => {
                let (reply, answer) = cb::bounded(1);
                sender.send(Message {
                    fields: [i; 8],
                    reply: Some(ReplyTx::Crossbeam(reply)),
                })?;
                answer.recv()?;
            }
        }
        latency.record(start.elapsed().as_nanos() as u64)?;
    }
    Ok(latency)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let ways = [
        Receive::Flume,
        Receive::CrossbeamSpin,
        Receive::CrossbeamSleep(Duration::from_micros(args.poll_micros)),
    ];
    println!(
        "one-way: {} messages of 64 B into a glommio shard, capacity {}",
        args.messages, args.capacity
    );
    println!(
        "{:<34} {:>12} {:>7} {:>16}",
        "receive", "msgs/s", "ratio", "shard CPU ns/msg"
    );
    let mut baseline = None;
    for how in ways {
        let r = run(how, args.capacity, args.messages, |tx| {
            one_way(tx, args.messages)
        })?;
        let rate = args.messages as f64 / r.elapsed.as_secs_f64();
        let base = *baseline.get_or_insert(rate);
        println!(
            "{:<34} {:>12.0} {:>7.2} {:>16.0}",
            how.name(),
            rate,
            rate / base,
            r.shard_cpu.as_nanos() as f64 / args.messages as f64
        );
    }
    println!();
    println!(
        "round trips: {} requests, each with its own reply channel, one at a time",
        args.round_trips
    );
    println!(
        "{:<34} {:>10} {:>7} {:>9} {:>9} {:>18}",
        "receive", "trips/s", "ratio", "p50 us", "p99 us", "shard CPU us/trip"
    );
    let mut baseline = None;
    for how in ways {
        let r = run(how, args.capacity, args.round_trips, |tx| {
            round_trips(tx, how, args.round_trips)
        })?;
        let rate = args.round_trips as f64 / r.elapsed.as_secs_f64();
        let base = *baseline.get_or_insert(rate);
        println!(
            "{:<34} {:>10.0} {:>7.2} {:>9.1} {:>9.1} {:>18.1}",
            how.name(),
            rate,
            rate / base,
            r.latency.value_at_quantile(0.5) as f64 / 1e3,
            r.latency.value_at_quantile(0.99) as f64 / 1e3,
            r.shard_cpu.as_nanos() as f64 / 1e3 / args.round_trips as f64
        );
    }
    Ok(())
}
