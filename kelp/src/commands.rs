//! What each subcommand does.

use std::io::{ErrorKind, Write};
use std::path::Path;

use anyhow::Context;
use client::{
    Client, ClientError, ClientOptions, ProducerConfig, SubscribeOptions, TopicInfo, ValueSource,
};
use tokio::io::AsyncBufReadExt;

use crate::cli::{BrokerArgs, ControlArgs, PubArgs, ServeArgs, SubArgs, TopicCommand};
use crate::text::{escape_into, split_line};

/// Bytes of the stdin and stdout buffers: large, so millions of lines cost
/// few syscalls.
const IO_BUFFER_BYTES: usize = 1 << 20;

pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = engine::BrokerConfig {
        data_dir: args.data_dir,
        listen: args.listen,
        shards: args.shards,
        buffer_bytes: args.buffer_bytes,
        flush_age_ms: args.flush_age_ms,
        drop_flushed_pages: args.drop_flushed_pages,
        payload_grace_ms: args.payload_grace_ms,
        payload_sweep_interval_ms: args.payload_sweep_ms,
        kafka_listen: args.kafka,
        control: args.control,
        pin_shards: !args.unpinned,
        quic_driver: match args.quic_driver {
            crate::cli::QuicDriverArg::Tokio => engine::QuicDriver::Tokio,
            crate::cli::QuicDriverArg::Shard => engine::QuicDriver::Shard,
        },
        // Every other limit keeps the engine's default.
        ..engine::BrokerConfig::default()
    };
    engine::run(config).context("broker stopped with an error")
}

/// Run the control plane until SIGINT or SIGTERM.
pub fn control(args: ControlArgs) -> anyhow::Result<()> {
    // Blocked before any thread starts, so only the wait below takes them.
    let signals = engine::TerminationSignals::block();
    let config = control::ControlServerConfig {
        listen: args.listen,
        data_dir: args.data_dir,
        broker_silence_ms: args.broker_silence_ms,
        tick_ms: args.tick_ms,
        ..control::ControlServerConfig::default()
    };
    control::ControlServer::run_until(config, || {
        let signal = signals.wait();
        log::info!("received signal {signal}; stopping the control plane");
    })
    .context("control plane stopped with an error")
}

async fn connect(broker: &BrokerArgs) -> anyhow::Result<Client> {
    let options = ClientOptions {
        tls_ca_file: broker.tls_ca.clone(),
        payload_dir: broker.payload_dir.clone(),
        ..ClientOptions::default()
    };
    // The error already says "cannot reach broker at ADDR" when it cannot.
    Ok(Client::connect(&broker.broker, broker.transport.into(), options).await?)
}

pub async fn topic(command: TopicCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        TopicCommand::Create {
            topic,
            segments,
            broker,
        } => {
            let info = connect(&broker)
                .await?
                .create_topic(&topic, segments)
                .await
                .with_context(|| format!("cannot create topic {topic}"))?;
            writeln!(
                out,
                "created {} with {} segments",
                info.name,
                info.segments.len()
            )?;
        }
        TopicCommand::List { broker } => {
            let topics = connect(&broker)
                .await?
                .list_topics()
                .await
                .context("cannot list topics")?;
            for t in topics {
                writeln!(out, "{t}")?;
            }
        }
        TopicCommand::Describe { topic, broker } => {
            let info = connect(&broker)
                .await?
                .describe_topic(&topic)
                .await
                .with_context(|| format!("cannot describe topic {topic}"))?;
            out.write_all(describe_table(&info).as_bytes())?;
        }
        TopicCommand::Delete { topic, broker } => {
            connect(&broker)
                .await?
                .delete_topic(&topic)
                .await
                .with_context(|| format!("cannot delete topic {topic}"))?;
            writeln!(out, "deleted {topic}")?;
        }
    }
    Ok(())
}

/// The `topic describe` table: one row per segment, by range start.
pub fn describe_table(info: &TopicInfo) -> String {
    let mut segments: Vec<_> = info.segments.iter().collect();
    segments.sort_by_key(|s| (s.start, s.id));
    let mut out = format!("topic {}\n", info.name);
    out += &format!(
        "{:>7}  {:>5}  {:<19}  {:<6}  {:>5}  {:>11}  {:>14}  {}\n",
        "SEGMENT",
        "EPOCH",
        "RANGE",
        "STATE",
        "SHARD",
        "NEXT OFFSET",
        "APPENDED BYTES",
        "SUCCESSORS"
    );
    for s in segments {
        let successors: Vec<String> = s.successors.iter().map(u32::to_string).collect();
        let row = format!(
            "{:>7}  {:>5}  {:<19}  {:<6}  {:>5}  {:>11}  {:>14}  {}",
            s.id,
            s.epoch,
            format!("{:08x}-{:08x}", s.start, s.end),
            if s.sealed { "sealed" } else { "open" },
            s.shard,
            s.next_offset,
            s.appended_bytes,
            if successors.is_empty() {
                "-".to_owned()
            } else {
                successors.join(",")
            }
        );
        out += row.trim_end();
        out.push('\n');
    }
    out
}

pub async fn publish(args: PubArgs) -> anyhow::Result<()> {
    let client = connect(&args.broker).await?;
    let config = ProducerConfig {
        ack: args.ack.into(),
        batch_bytes_max: args.batch_bytes,
        linger_ms: args.linger_ms,
        by_ref_over: args.by_ref_over.0,
        ..ProducerConfig::default()
    };
    let producer = client
        .producer(&args.topic, config)
        .await
        .with_context(|| format!("cannot publish to {}", args.topic))?;
    let mut stdin = tokio::io::BufReader::with_capacity(IO_BUFFER_BYTES, tokio::io::stdin());
    // One line buffer, reused: no allocation per line.
    let mut line = Vec::with_capacity(4096);
    let mut line_number = 0u64;
    loop {
        line.clear();
        if stdin
            .read_until(b'\n', &mut line)
            .await
            .context("cannot read stdin")?
            == 0
        {
            break;
        }
        line_number += 1;
        let (key, value) = split_line(&line);
        producer
            .send(key, value, &[])
            .await
            .with_context(|| format!("cannot publish line {line_number} to {}", args.topic))?;
    }
    let records = producer
        .flush()
        .await
        .with_context(|| format!("cannot publish to {}", args.topic))?;
    if config.ack == client::AckMode::None {
        println!("sent {records} records");
    } else {
        println!("acknowledged {records} records");
    }
    Ok(())
}

pub async fn subscribe(args: SubArgs) -> anyhow::Result<()> {
    let client = connect(&args.broker).await?;
    let options = SubscribeOptions {
        resolve_references: !args.references,
        ..SubscribeOptions::default()
    };
    let mut subscriber = client
        .subscribe(&args.topic, args.from, options)
        .await
        .with_context(|| format!("cannot subscribe to {}", args.topic))?;
    let mut stdout = std::io::stdout().lock();
    let mut buf = Vec::with_capacity(IO_BUFFER_BYTES);
    let mut printed = 0u64;
    let mut unreadable = 0u64;
    let result: anyhow::Result<()> = async {
        while args.count.is_none_or(|n| printed < n) {
            let record = match subscriber.next_if_ready() {
                Some(r) => r,
                None => {
                    // About to wait for data: show what we have.
                    stdout.write_all(&buf)?;
                    stdout.flush()?;
                    buf.clear();
                    match subscriber.next().await {
                        Some(r) => r,
                        None => break,
                    }
                }
            };
            let record = match record {
                Ok(r) => r,
                // One record's payload is missing or altered: say so and
                // go on with the rest of the stream.
                Err(e @ ClientError::Payload { .. }) => {
                    stdout.write_all(&buf)?;
                    stdout.flush()?;
                    buf.clear();
                    eprintln!("kelp: {e}");
                    unreadable += 1;
                    printed += 1;
                    continue;
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read {}", args.topic));
                }
            };
            escape_into(&mut buf, &record.key);
            buf.push(b'\t');
            match record.source {
                ValueSource::Reference(r) if args.references => {
                    buf.extend_from_slice(r.to_string().as_bytes());
                }
                // Too large to hold: stream it.
                ValueSource::Reference(r) => {
                    stdout.write_all(&buf)?;
                    buf.clear();
                    let mut reader = client.open_payload(&args.topic, &r)?;
                    while let Some(piece) = reader.next_piece().await.with_context(|| {
                        format!(
                            "cannot read the payload of record {} in segment {}",
                            record.offset, record.segment
                        )
                    })? {
                        escape_into(&mut buf, &piece);
                        stdout.write_all(&buf)?;
                        buf.clear();
                    }
                }
                ValueSource::Inline | ValueSource::Resolved(_) => {
                    escape_into(&mut buf, &record.value);
                }
            }
            buf.push(b'\n');
            printed += 1;
            if buf.len() >= IO_BUFFER_BYTES {
                stdout.write_all(&buf)?;
                buf.clear();
            }
        }
        stdout.write_all(&buf)?;
        stdout.flush()?;
        Ok(())
    }
    .await;
    quiet_broken_pipe(result)?;
    if unreadable > 0 {
        anyhow::bail!(
            "{unreadable} record(s) of {} had unreadable payloads",
            args.topic
        );
    }
    Ok(())
}

/// A reader that went away (`kelp sub ... | head`) is a normal end.
fn quiet_broken_pipe(result: anyhow::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}

pub fn chunk_cat(path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read chunk file {}", path.display()))?;
    let chunk = wire::ChunkView::open(&bytes)
        .with_context(|| format!("{} is not a valid chunk file", path.display()))?;
    let mut stdout = std::io::stdout().lock();
    let mut buf = Vec::with_capacity(IO_BUFFER_BYTES);
    let result: anyhow::Result<()> = (|| {
        for batch in chunk.batches() {
            for record in batch.records() {
                let offset = batch.base_offset() + u64::from(record.offset_delta);
                write!(buf, "{offset}\t{}\t", record.timestamp_ms)?;
                escape_into(&mut buf, record.key);
                buf.push(b'\t');
                match record.reference() {
                    Some(r) => buf.extend_from_slice(r.to_string().as_bytes()),
                    None => escape_into(&mut buf, record.value),
                }
                buf.push(b'\n');
                if buf.len() >= IO_BUFFER_BYTES {
                    stdout.write_all(&buf)?;
                    buf.clear();
                }
            }
        }
        stdout.write_all(&buf)?;
        stdout.flush()?;
        Ok(())
    })();
    quiet_broken_pipe(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::SegmentInfo;

    #[test]
    fn describe_table_reads_well() {
        let info = TopicInfo {
            name: "ns/t".into(),
            segments: vec![
                SegmentInfo {
                    id: 2,
                    epoch: 1,
                    start: 0x8000_0000,
                    end: 1 << 32,
                    sealed: false,
                    shard: 1,
                    next_offset: 42,
                    appended_bytes: 4200,
                    successors: vec![],
                    ..SegmentInfo::default()
                },
                SegmentInfo {
                    id: 1,
                    epoch: 1,
                    start: 0,
                    end: 0x8000_0000,
                    sealed: true,
                    shard: 0,
                    next_offset: 7,
                    appended_bytes: 700,
                    successors: vec![3, 4],
                    ..SegmentInfo::default()
                },
            ],
        };
        let table = describe_table(&info);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "topic ns/t");
        assert!(lines[1].starts_with("SEGMENT"));
        assert!(lines[2].contains("00000000-80000000"), "{table}");
        assert!(lines[2].contains("sealed") && lines[2].ends_with("3,4"));
        assert!(lines[3].contains("80000000-100000000"), "{table}");
        assert!(lines[3].contains("open") && lines[3].contains("42"));
        assert!(
            lines[3].contains("4200") && lines[2].contains("700"),
            "{table}"
        );
    }
}
