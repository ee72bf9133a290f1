//! What each subcommand does.

use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use client::{Client, ClientError, ClientOptions, ProducerConfig, SubscribeOptions, ValueSource};
use tokio::io::AsyncBufReadExt;

use crate::cli::{
    BrokerArgs, ControlArgs, FormatPiece, OutputArgs, OutputFormat, PayloadArgs, PolicyArgs,
    PubArgs, ServeArgs, Start, SubArgs, TopicCommand,
};
use crate::tables::{brokers_json, brokers_table, describe_table, topic_json, Columns};
use crate::text::{escape_into, split_line};

/// Bytes of the stdin and stdout buffers: large, so millions of lines cost
/// few syscalls.
const IO_BUFFER_BYTES: usize = 1 << 20;

/// The auth file at `path`, read and checked.
fn load_auth(path: Option<&std::path::Path>) -> anyhow::Result<Option<Arc<auth::AuthFile>>> {
    match path {
        None => Ok(None),
        Some(path) => {
            let file = auth::AuthFile::load(path)?;
            log::info!(
                "authentication on: {} users from {}",
                file.user_names().count(),
                path.display()
            );
            Ok(Some(Arc::new(file)))
        }
    }
}

pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let auth = load_auth(args.auth.as_deref())?;
    if auth.is_none() {
        log::warn!("no --auth file: any client that reaches the broker's ports may do anything");
    }
    let config = engine::BrokerConfig {
        data_dir: args.data_dir,
        listen: args.listen,
        shards: args.shards,
        buffer_bytes: args.buffer_bytes,
        buffer_bytes_max: args.buffer_bytes_max,
        flush_age_ms: args.flush_age_ms,
        drop_flushed_pages: args.drop_flushed_pages,
        payload_grace_ms: args.payload_grace_ms,
        payload_sweep_interval_ms: args.payload_sweep_ms,
        http_listen: args.http,
        kafka_listen: args.kafka,
        kafka_advertised: args.kafka_advertise.clone(),
        kafka_tls: args.kafka_tls,
        tcp_tls: args.tcp_tls,
        kafka: engine::KafkaSettings {
            num_partitions: args.kafka_num_partitions,
            group_min_session_timeout_ms: args.kafka_group_min_session_timeout_ms,
            group_max_session_timeout_ms: args.kafka_group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms: args.kafka_group_initial_rebalance_delay_ms,
        },
        s3: args.filer.s3_settings(),
        filer: args.filer.filer,
        control: args.control,
        pin_shards: !args.unpinned,
        idle_timeout_ms: args.idle_timeout_ms,
        frame_timeout_ms: args.frame_timeout_ms,
        connections_per_ip_max: usize::try_from(args.connections_per_ip_max).unwrap_or(usize::MAX),
        receive_bytes_max: args.receive_bytes_max,
        unflushed_bytes_max: args.unflushed_bytes_max,
        disk_full_wait_ms: args.disk_full_wait_ms,
        filer_uploads: args.filer_uploads,
        filer_reads: args.filer_reads,
        chunk_cache_bytes: args.chunk_cache_bytes,
        auth,
        tls_cert: args.tls_cert.zip(args.tls_key),
        // Every other limit keeps the engine's default.
        ..engine::BrokerConfig::default()
    };
    engine::run(config).context("broker stopped with an error")
}

/// `kelp auth hash`: a password's credentials, from stdin.
pub fn auth_hash() -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the password from stdin")?;
    let password = line.trim_end_matches(['\n', '\r']);
    anyhow::ensure!(!password.is_empty(), "no password on stdin");
    let mut out = std::io::stdout().lock();
    for (key, hash) in [
        ("scram_sha_256", auth::ScramHash::Sha256),
        ("scram_sha_512", auth::ScramHash::Sha512),
    ] {
        let credential =
            auth::scram::ScramCredential::fresh(hash, password).map_err(|e| anyhow::anyhow!(e))?;
        writeln!(out, "{key} = \"{credential}\"")?;
    }
    Ok(())
}

/// Run the control plane until SIGINT or SIGTERM.
pub fn control(args: ControlArgs) -> anyhow::Result<()> {
    // Blocked before any thread starts, so only the wait below takes them.
    let signals = engine::TerminationSignals::block();
    let filer = match &args.filer.filer {
        None => None,
        Some(url) => Some(open_cluster_filer(url, &args.filer.s3_settings())?),
    };
    let election: Option<Arc<dyn control::election::Election>> = if args.etcd.is_empty() {
        None
    } else {
        let advertised = args
            .advertise
            .clone()
            .unwrap_or_else(|| args.listen.to_string());
        let candidacy =
            election::CandidateConfig::new(args.etcd.clone(), args.cluster.clone(), advertised)
                .with_lease_ttl_s(args.lease_ttl_s);
        let candidate = election::Candidate::start(candidacy).with_context(|| {
            format!(
                "joining the election of cluster {} through etcd {}",
                args.cluster,
                args.etcd.join(",")
            )
        })?;
        log::info!(
            "standing for leader of cluster {} through etcd {} (lease {} s)",
            args.cluster,
            args.etcd.join(","),
            args.lease_ttl_s
        );
        Some(Arc::new(candidate))
    };
    let config = control::ControlServerConfig {
        filer,
        listen: args.listen,
        data_dir: args.data_dir,
        broker_silence_ms: args.broker_silence_ms,
        follower_lag_max_ms: args.follower_lag_ms,
        sealer_wait_ms: args.sealer_wait_ms,
        tick_ms: args.tick_ms,
        election,
        connections_per_ip_max: usize::try_from(args.connections_per_ip_max).unwrap_or(usize::MAX),
        receive_bytes_max: args.receive_bytes_max,
        idle_timeout_ms: args.idle_timeout_ms,
        frame_timeout_ms: args.frame_timeout_ms,
        auth: load_auth(args.auth.as_deref())?,
        ..control::ControlServerConfig::default()
    };
    let server = control::ControlServer::start(config).context("starting the control plane")?;
    let admin = match args.http {
        Some(listen) => Some(
            engine::admin_http::AdminListener::start(
                listen,
                Arc::new(crate::control_pages::ControlPages {
                    figures: server.figures(),
                }),
            )
            .with_context(|| format!("admin HTTP listener on {listen}"))?,
        ),
        None => None,
    };
    let signal = signals.wait();
    log::info!("received signal {signal}; stopping the control plane");
    server.stop();
    if let Some(admin) = admin {
        admin.stop();
    }
    Ok(())
}

/// The filer `kelp control --filer URL` names, opened, with the absolute
/// URL brokers will be handed.
fn open_cluster_filer(
    url: &filer::FilerUrl,
    s3: &filer_s3::S3Settings,
) -> anyhow::Result<control::ClusterFiler> {
    let url = match url {
        filer::FilerUrl::Local(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            filer::FilerUrl::Local(
                std::fs::canonicalize(dir).with_context(|| format!("resolve {}", dir.display()))?,
            )
        }
        s3_url => s3_url.clone(),
    };
    let filer = filer_s3::open(&url, s3).with_context(|| format!("open the filer {url}"))?;
    Ok(control::ClusterFiler { url, filer })
}

async fn connect(broker: &BrokerArgs) -> anyhow::Result<Client> {
    connect_with(broker, None).await
}

async fn connect_with(
    broker: &BrokerArgs,
    payload: Option<&PayloadArgs>,
) -> anyhow::Result<Client> {
    let options = ClientOptions {
        tls_ca_file: broker.tls_ca.clone(),
        tls_insecure: broker.insecure,
        tls_server_name: broker.tls_server_name.clone(),
        request_timeout_ms: broker.request_timeout_ms,
        payload_dir: payload.and_then(|p| p.payload_dir.clone()),
        payload_filer: payload.and_then(|p| p.payload_filer.clone()),
        credentials: match (&broker.user, &broker.password) {
            (Some(user), Some(password)) => Some(client::Credentials::new(user, password)),
            _ => None,
        },
        ..ClientOptions::default()
    };
    // The error already says "cannot reach broker at ADDR" when it cannot.
    Ok(Client::connect(&broker.broker, broker.transport.into(), options).await?)
}

pub async fn topic(command: TopicCommand) -> anyhow::Result<()> {
    let client = connect(command.broker()).await?;
    let result = topic_with(&client, command).await;
    client.close().await;
    result
}

async fn topic_with(client: &Client, command: TopicCommand) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        TopicCommand::Create {
            topic,
            segments,
            replicas,
            broker: _,
        } => {
            let info = client
                .create_topic_with_replicas(&topic, segments, replicas.unwrap_or(0))
                .await
                .with_context(|| format!("cannot create topic {topic}"))?;
            let kept_on = 1 + info.segments.first().map_or(0, |s| s.followers.len());
            writeln!(
                out,
                "created {} with {} segments, each kept on {kept_on} broker{}",
                info.name,
                info.segments.len(),
                if kept_on == 1 { "" } else { "s" }
            )?;
        }
        TopicCommand::List { output, broker: _ } => {
            let topics = client.list_topics().await.context("cannot list topics")?;
            match output.output {
                OutputFormat::Json => writeln!(out, "{}", serde_json::json!(topics))?,
                OutputFormat::Table | OutputFormat::Wide => {
                    for t in topics {
                        writeln!(out, "{t}")?;
                    }
                }
            }
        }
        TopicCommand::Describe {
            topic,
            output,
            broker: _,
        } => {
            let info = client
                .describe_topic(&topic)
                .await
                .with_context(|| format!("cannot describe topic {topic}"))?;
            print_layout(&mut out, &info, &output)?;
        }
        TopicCommand::Delete { topic, broker: _ } => {
            client
                .delete_topic(&topic)
                .await
                .with_context(|| format!("cannot delete topic {topic}"))?;
            writeln!(out, "deleted {topic}")?;
        }
        TopicCommand::Split {
            topic,
            segment,
            pieces,
            output,
            broker: _,
        } => {
            let info = client
                .split_segment(&topic, segment, pieces)
                .await
                .with_context(|| format!("cannot split segment {segment} of {topic}"))?;
            print_layout(&mut out, &info, &output)?;
        }
        TopicCommand::Merge {
            topic,
            a,
            b,
            output,
            broker: _,
        } => {
            let info = client
                .merge_segments(&topic, a, b)
                .await
                .with_context(|| format!("cannot merge segments {a} and {b} of {topic}"))?;
            print_layout(&mut out, &info, &output)?;
        }
        TopicCommand::Move {
            topic,
            segment,
            to,
            output,
            broker: _,
        } => {
            let info = client
                .move_segment(&topic, segment, to)
                .await
                .with_context(|| format!("cannot move segment {segment} of {topic}"))?;
            print_layout(&mut out, &info, &output)?;
        }
        TopicCommand::Policy(args) => {
            let policy = policy_json(&args)?;
            let info = client
                .set_policy(&args.topic, &policy)
                .await
                .with_context(|| format!("cannot set the scaling policy of {}", args.topic))?;
            if args.output.output == OutputFormat::Json {
                let policy: serde_json::Value = if policy.is_empty() {
                    serde_json::Value::Null
                } else {
                    serde_json::from_str(&policy)?
                };
                let mut doc = topic_json(&info);
                doc["policy"] = policy;
                writeln!(out, "{doc}")?;
            } else {
                if policy.is_empty() {
                    writeln!(out, "removed the scaling policy of {}", info.name)?;
                } else {
                    writeln!(out, "scaling policy of {}:", info.name)?;
                    out.write_all(policy_lines(&policy)?.as_bytes())?;
                }
                print_layout(&mut out, &info, &args.output)?;
            }
        }
    }
    Ok(())
}

/// A topic's layout as `--output` asks: the segments table or JSON.
fn print_layout(
    out: &mut impl Write,
    info: &client::TopicInfo,
    output: &OutputArgs,
) -> anyhow::Result<()> {
    match output.output {
        OutputFormat::Table => out.write_all(describe_table(info, Columns::Narrow).as_bytes())?,
        OutputFormat::Wide => out.write_all(describe_table(info, Columns::Wide).as_bytes())?,
        OutputFormat::Json => writeln!(out, "{}", topic_json(info))?,
    }
    Ok(())
}

/// A scaling policy's JSON as `  field: value` lines, for people.
fn policy_lines(policy_json: &str) -> anyhow::Result<String> {
    let policy: serde_json::Value = serde_json::from_str(policy_json)?;
    let mut lines = String::new();
    let mut push = |name: &str, value: &serde_json::Value| {
        let text = match value {
            serde_json::Value::Array(items) => items
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        lines.push_str(&format!("  {name}: {text}\n"));
    };
    if let serde_json::Value::Object(fields) = &policy {
        for (name, value) in fields {
            match value {
                serde_json::Value::Object(inner) => {
                    for (inner_name, v) in inner {
                        push(&format!("{name}.{inner_name}"), v);
                    }
                }
                v => push(name, v),
            }
        }
    }
    Ok(lines)
}

/// The JSON of the scaling policy `kelp topic policy` sets: defaults with
/// the given fields replaced, checked here so a bad value is refused
/// before it reaches the control plane; empty with `--off`.
pub fn policy_json(args: &PolicyArgs) -> anyhow::Result<String> {
    if args.off {
        return Ok(String::new());
    }
    let mut policy = control::ScalingPolicy::default();
    if let Some(v) = args.target_bytes_per_s {
        policy.target.bytes_per_s = v;
    }
    if let Some(v) = args.target_records_per_s {
        policy.target.records_per_s = v;
    }
    if let Some(w) = &args.windows_ms {
        policy.windows_ms = w
            .as_slice()
            .try_into()
            .map_err(|_| anyhow::anyhow!("--windows-ms takes four windows, got {}", w.len()))?;
    }
    if let Some(v) = args.cooldown_ms {
        policy.cooldown_ms = v;
    }
    if let Some(v) = args.segments_min {
        policy.segments_min = v;
    }
    if let Some(v) = args.segments_max {
        policy.segments_max = v;
    }
    if let Some(v) = args.split_pieces_max {
        policy.split_pieces_max = v;
    }
    policy
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid scaling policy: {e}"))?;
    Ok(serde_json::to_string(&policy)?)
}

/// `kelp cluster`: the brokers table.
pub async fn cluster(output: OutputArgs, broker: BrokerArgs) -> anyhow::Result<()> {
    let brokers = connect(&broker)
        .await?
        .list_brokers()
        .await
        .context("cannot list the cluster's brokers")?;
    let mut out = std::io::stdout().lock();
    match output.output {
        OutputFormat::Json => writeln!(out, "{}", brokers_json(&brokers))?,
        OutputFormat::Table | OutputFormat::Wide => {
            out.write_all(brokers_table(&brokers).as_bytes())?
        }
    }
    Ok(())
}

pub async fn publish(args: PubArgs) -> anyhow::Result<()> {
    let client = connect_with(&args.broker, Some(&args.payload)).await?;
    let headers: Vec<(&[u8], &[u8])> = args
        .headers
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect();
    let config = ProducerConfig {
        ack: args.ack.into(),
        batch_bytes_max: args.batch_bytes,
        linger_ms: args.linger_ms,
        by_ref_over: args.by_ref_over.0,
        idempotent: args.idempotent,
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
            .send(key, value, &headers)
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
    client.close().await;
    Ok(())
}

pub async fn subscribe(args: SubArgs) -> anyhow::Result<()> {
    let client = connect_with(&args.broker, Some(&args.payload)).await?;
    let (from, from_end) = match args.from {
        Start::At(from) => (from, None),
        Start::BeforeEnd(n) => (client::FetchFrom::Latest, Some(n)),
    };
    let options = SubscribeOptions {
        resolve_references: !args.references,
        from_end,
        // A tail outlives broker restarts.
        reconnect: true,
        skip_corrupt: args.skip_corrupt,
        ..SubscribeOptions::default()
    };
    let subscribed = if args.segments.is_empty() {
        client.subscribe(&args.topic, from, options).await
    } else {
        client
            .subscribe_segments(&args.topic, &args.segments, from, options)
            .await
    };
    let mut subscriber =
        subscribed.with_context(|| format!("cannot subscribe to {}", args.topic))?;
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
                // Damaged records skipped (--skip-corrupt), or records
                // read from a dead owner that it never stored: say which.
                Err(e @ (ClientError::Skipped { .. } | ClientError::Truncated { .. })) => {
                    stdout.write_all(&buf)?;
                    stdout.flush()?;
                    buf.clear();
                    eprintln!("kelp: {e}");
                    continue;
                }
                Err(e) => {
                    // What was read before the error is printed first.
                    stdout.write_all(&buf)?;
                    stdout.flush()?;
                    buf.clear();
                    return Err(e).with_context(|| format!("cannot read {}", args.topic));
                }
            };
            for piece in &args.format.0 {
                match piece {
                    FormatPiece::Value => {
                        write_value(&client, &args, &record, &mut buf, &mut stdout).await?
                    }
                    other => write_field(other, &args.topic, &record, &mut buf),
                }
            }
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
    drop(subscriber);
    client.close().await;
    quiet_broken_pipe(result)?;
    if unreadable > 0 {
        anyhow::bail!(
            "{unreadable} record(s) of {} had unreadable payloads",
            args.topic
        );
    }
    Ok(())
}

/// One `--format` field other than the value, appended to `buf`.
fn write_field(piece: &FormatPiece, topic: &str, record: &client::OwnedRecord, buf: &mut Vec<u8>) {
    match piece {
        FormatPiece::Literal(bytes) => buf.extend_from_slice(bytes),
        FormatPiece::Key => escape_into(buf, &record.key),
        FormatPiece::Topic => buf.extend_from_slice(topic.as_bytes()),
        FormatPiece::Segment => buf.extend_from_slice(record.segment.to_string().as_bytes()),
        FormatPiece::Offset => buf.extend_from_slice(record.offset.to_string().as_bytes()),
        FormatPiece::Timestamp => {
            buf.extend_from_slice(record.timestamp_ms.to_string().as_bytes());
        }
        FormatPiece::Headers => {
            for (i, (name, value)) in record.headers.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                escape_into(buf, name);
                buf.push(b'=');
                escape_into(buf, value);
            }
        }
        FormatPiece::KeyLength => buf.extend_from_slice(record.key.len().to_string().as_bytes()),
        FormatPiece::ValueLength => {
            let length = match record.source {
                ValueSource::Reference(r) => r.length,
                ValueSource::Inline | ValueSource::Resolved(_) => record.value.len() as u64,
            };
            buf.extend_from_slice(length.to_string().as_bytes());
        }
        // The value may need the filer: `write_value`.
        FormatPiece::Value => {}
    }
}

/// The record's value, escaped, appended to `buf`; a payload too large to
/// hold is streamed from the filer straight to `stdout`.
async fn write_value(
    client: &Client,
    args: &SubArgs,
    record: &client::OwnedRecord,
    buf: &mut Vec<u8>,
    stdout: &mut impl Write,
) -> anyhow::Result<()> {
    match record.source {
        ValueSource::Reference(r) if args.references => {
            buf.extend_from_slice(r.to_string().as_bytes());
        }
        ValueSource::Reference(r) => {
            stdout.write_all(buf)?;
            buf.clear();
            let mut reader = client.open_payload(&args.topic, &r)?;
            while let Some(piece) = reader.next_piece().await.with_context(|| {
                format!(
                    "cannot read the payload of record {} in segment {}",
                    record.offset, record.segment
                )
            })? {
                escape_into(buf, &piece);
                stdout.write_all(buf)?;
                buf.clear();
            }
        }
        ValueSource::Inline | ValueSource::Resolved(_) => escape_into(buf, &record.value),
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
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn policy_flags_become_the_policy_json() {
        use clap::Parser;
        let parse = |args: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(
                ["kelp", "topic", "policy", "ns/t"].iter().chain(args),
            )
            .unwrap();
            let crate::cli::Command::Topic {
                command: TopicCommand::Policy(p),
            } = cli.command
            else {
                panic!()
            };
            policy_json(&p)
        };
        let json = parse(&[
            "--target-bytes-per-s",
            "1000000",
            "--target-records-per-s",
            "5000",
            "--windows-ms",
            "10,20,30,40",
            "--cooldown-ms",
            "500",
            "--segments-min",
            "2",
            "--segments-max",
            "16",
        ])
        .unwrap();
        let policy: control::ScalingPolicy = serde_json::from_str(&json).unwrap();
        assert_eq!(policy.target.bytes_per_s, 1_000_000);
        assert_eq!(policy.target.records_per_s, 5_000);
        assert_eq!(policy.windows_ms, [10, 20, 30, 40]);
        assert_eq!(policy.cooldown_ms, 500);
        assert_eq!((policy.segments_min, policy.segments_max), (2, 16));
        assert_eq!(
            policy.split_pieces_max,
            control::ScalingPolicy::default().split_pieces_max
        );
        // Unset fields keep their defaults.
        let json = parse(&["--cooldown-ms", "7"]).unwrap();
        let policy: control::ScalingPolicy = serde_json::from_str(&json).unwrap();
        assert_eq!(
            policy,
            control::ScalingPolicy {
                cooldown_ms: 7,
                ..control::ScalingPolicy::default()
            }
        );
        assert_eq!(parse(&["--off"]).unwrap(), "");
        let e = parse(&["--segments-min", "5", "--segments-max", "4"]).unwrap_err();
        assert!(e.to_string().contains("invalid scaling policy"), "{e}");
        let e = parse(&["--windows-ms", "1,2,3"]).unwrap_err();
        assert!(e.to_string().contains("four windows, got 3"), "{e}");
    }
}
