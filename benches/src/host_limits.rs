//! The limits of this host, measured in the same run as kelp with the same
//! sizes: the same produce frames pushed into a raw TCP sink and over one
//! raw quinn stream (the sinks are in [`crate::baseline`]), and sequential
//! writes of the same volume into the data directory's filesystem, with and
//! without `fdatasync`; and with an S3 filer, the store's own PUT throughput.

use std::{
    fs::OpenOptions,
    io::Write,
    net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener, UdpSocket as StdUdpSocket},
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
    sync::{mpsc, Arc},
    thread,
    time::{Duration, Instant},
};

use anyhow::{anyhow, ensure, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wire::DataRequest;

use crate::baseline::{
    current_thread_runtime, parse_reply, quinn_sink, tcp_sink, tls_configs, REPLY_BYTES,
    SERVER_NAME,
};
use crate::frames::with_broker_windows;
use crate::workload::Workload;

/// Bytes per `write` of the file baselines, and between `fdatasync`s of the
/// synced one: the broker's default buffer (chunk) size.
pub const FILE_WRITE_BYTES: usize = 8 << 20;

/// One limit: bytes moved in a time.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// Payload bytes: record values, as kelp's figures count them.
    pub payload_bytes: u64,
    pub elapsed: Duration,
}

impl Limit {
    pub fn mb_per_s(&self) -> f64 {
        self.payload_bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
    }
}

/// `batches` produce frames of `workload` into a raw TCP sink; the clock
/// runs from the first write to the sink's count.
pub fn raw_tcp(workload: &Workload, topic: &str, batches: u64, timeout: Duration) -> Result<Limit> {
    let listener = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (sink_tx, sink_rx) = mpsc::channel();
    thread::Builder::new()
        .name("sink-tcp".into())
        .spawn(move || {
            let _ = sink_tx.send(tcp_sink(listener));
        })?;
    let rt = current_thread_runtime()?;
    let expected = batches * workload.frame_bytes(topic) as u64;
    let (count, elapsed) = rt.block_on(async {
        tokio::time::timeout(timeout, async {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (mut read, write) = stream.into_split();
            let start = Instant::now();
            let mut write = send_frames(write, workload, topic, batches).await?;
            write.shutdown().await?;
            let mut reply = Vec::with_capacity(REPLY_BYTES);
            read.read_to_end(&mut reply).await?;
            anyhow::Ok((parse_reply(&reply)?, start.elapsed()))
        })
        .await
        .map_err(|_| anyhow!("raw TCP baseline timed out"))?
    })?;
    let sink = sink_rx
        .recv_timeout(timeout)
        .map_err(|_| anyhow!("TCP sink did not finish"))??;
    sent_whole("TCP sink", count, sink.bytes, expected)?;
    Ok(Limit {
        payload_bytes: batches * workload.batch_payload_bytes(),
        elapsed,
    })
}

/// Checks that `sink` counted (`count`, told the sender) and took
/// (`took`) every one of the `expected` bytes sent.
fn sent_whole(sink: &str, count: u64, took: u64, expected: u64) -> Result<()> {
    ensure!(
        count == expected && took == expected,
        "{sink} took {count} bytes ({took} by its own count), {expected} were sent"
    );
    Ok(())
}

/// The same frames over one quinn stream to a plain quinn sink with the
/// broker's transport windows.
pub fn raw_quinn(
    workload: &Workload,
    topic: &str,
    batches: u64,
    timeout: Duration,
) -> Result<Limit> {
    let tls = tls_configs()?;
    let socket = StdUdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let addr = socket.local_addr()?;
    let server = with_broker_windows(tls.server);
    let (sink_tx, sink_rx) = mpsc::channel();
    thread::Builder::new()
        .name("sink-quinn".into())
        .spawn(move || {
            let _ = sink_tx.send(quinn_sink(socket, server));
        })?;
    let rt = current_thread_runtime()?;
    let expected = batches * workload.frame_bytes(topic) as u64;
    let client_config = tls.client;
    let (count, elapsed) = rt.block_on(async {
        tokio::time::timeout(timeout, async {
            let mut endpoint = quinn::Endpoint::client(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
            endpoint.set_default_client_config(client_config);
            let connection = endpoint.connect(addr, SERVER_NAME)?.await?;
            let (send, mut recv) = connection.open_bi().await?;
            let start = Instant::now();
            let mut send = send_frames(send, workload, topic, batches).await?;
            send.finish()?;
            // The count comes only after the sink has taken every byte.
            let reply = recv.read_to_end(REPLY_BYTES).await?;
            let elapsed = start.elapsed();
            connection.close(0u32.into(), b"done");
            endpoint.wait_idle().await;
            anyhow::Ok((parse_reply(&reply)?, elapsed))
        })
        .await
        .map_err(|_| anyhow!("raw quinn baseline timed out"))?
    })?;
    let sink = sink_rx
        .recv_timeout(timeout)
        .map_err(|_| anyhow!("quinn sink did not finish"))??;
    sent_whole("quinn sink", count, sink.bytes, expected)?;
    Ok(Limit {
        payload_bytes: batches * workload.batch_payload_bytes(),
        elapsed,
    })
}

/// Writes every frame, encoding each into one reused buffer.
async fn send_frames<W: AsyncWrite + Unpin>(
    mut write: W,
    workload: &Workload,
    topic: &str,
    batches: u64,
) -> Result<W> {
    let mut frame = Vec::with_capacity(workload.frame_bytes(topic));
    let segments = workload.segment_batches.len() as u64;
    for index in 0..batches {
        let segment = (index % segments) as u32;
        frame.clear();
        DataRequest::Produce {
            topic,
            segment,
            ack: workload.ack,
            batch: &workload.segment_batches[segment as usize],
        }
        .encode(index as u32, &mut frame);
        write.write_all(&frame).await?;
    }
    write.flush().await?;
    Ok(write)
}

/// Sequential writes of `bytes` (rounded up to whole writes) into a new
/// file under `dir`, `FILE_WRITE_BYTES` at a time; with `sync`, an
/// `fdatasync` after every write, as the broker makes each chunk durable.
/// The file is removed afterwards.
pub fn file_write(dir: &Path, bytes: u64, sync: bool) -> Result<Limit> {
    let path = dir.join(format!(
        "kelp-bench-write-{}-{}",
        std::process::id(),
        if sync { "fdatasync" } else { "nosync" }
    ));
    let buffer = vec![0x6Bu8; FILE_WRITE_BYTES];
    let writes = bytes.div_ceil(FILE_WRITE_BYTES as u64).max(1);
    let result = (|| {
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("create {}", path.display()))?;
        let start = Instant::now();
        for _ in 0..writes {
            file.write_all(&buffer)
                .with_context(|| format!("write {}", path.display()))?;
            if sync {
                file.sync_data()
                    .with_context(|| format!("fdatasync {}", path.display()))?;
            }
        }
        anyhow::Ok(start.elapsed())
    })();
    let removed = std::fs::remove_file(&path);
    let elapsed = result?;
    removed.with_context(|| format!("remove {}", path.display()))?;
    Ok(Limit {
        payload_bytes: writes * FILE_WRITE_BYTES as u64,
        elapsed,
    })
}

/// The S3 store's own PUT throughput: `objects` objects of
/// `object_bytes` (a chunk's size) created under
/// `<prefix>/kelp-bench-put-<pid>/` by `concurrency` uploaders at once
/// (kelp flushes one chunk per segment at a time), through the same client
/// kelp uses; the clock runs from the first PUT to the last answer. The
/// objects are deleted afterwards.
pub fn s3_put(url: &str, object_bytes: u64, objects: u64, concurrency: u32) -> Result<Limit> {
    let url = filer::FilerUrl::parse(url)?;
    anyhow::ensure!(
        matches!(url, filer::FilerUrl::S3 { .. }),
        "the S3 PUT baseline needs an s3:// filer, not {url}"
    );
    let store = filer_s3::open(&url, &filer_s3::S3Settings::default())?;
    let dir = filer::ObjectPath::new(format!("kelp-bench-put-{}", std::process::id()))?;
    let body = Arc::new(vec![0x6Bu8; usize::try_from(object_bytes)?]);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let uploaders: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, dir, body, next) = (store.clone(), dir.clone(), body.clone(), next.clone());
            thread::spawn(move || -> Result<()> {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= objects {
                        return Ok(());
                    }
                    store.create(&dir.join(&format!("{i:08}"))?, &body)?;
                }
            })
        })
        .collect();
    let mut result = Ok(());
    for uploader in uploaders {
        let done = uploader
            .join()
            .map_err(|_| anyhow!("an S3 uploader panicked"))?;
        if result.is_ok() {
            result = done;
        }
    }
    let elapsed = start.elapsed();
    let deleted = store.delete(&dir);
    result?;
    deleted.context("delete the baseline's objects")?;
    Ok(Limit {
        payload_bytes: objects * object_bytes,
        elapsed,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::broker_process::TempDir;

    #[test]
    fn file_write_writes_whole_pieces_and_removes_its_file() {
        let dir = TempDir::create(None, "kelp-limits-test").unwrap();
        for sync in [false, true] {
            let limit = file_write(dir.path(), 1, sync).unwrap();
            assert_eq!(limit.payload_bytes, FILE_WRITE_BYTES as u64);
            assert!(limit.mb_per_s() > 0.0);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
