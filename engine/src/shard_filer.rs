//! [`ShardFiler`]: how a shard's segments reach the filer. Chunk uploads
//! and seal markers go through the upload lane, chunk reads and listings
//! through the read lane (each a few threads of the shard's own, see
//! `filer_lane`), and reads of a filer that keeps nothing local through
//! the shard's [`ChunkCache`]. A store that stalls holds up the uploads in
//! flight and the segments waiting behind them, never a read, a spare
//! buffer or another shard.
//!
//! Flush failures of all the shard's segments are logged through one
//! [`LogLimit`]: the first at once, then one line per interval saying how
//! many were held back.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use filer::{Filer, ObjectPath};
use wire::message::ErrorCode;

use crate::chunk_cache::{Block, ChunkCache, CHUNK_CACHE_BLOCK_BYTES};
use crate::config::BrokerConfig;
use crate::filer_lane::FilerLane;
use crate::log_limit::LogLimit;
use crate::serve_error::ServeError;
use crate::shard_metrics::ShardMetrics;

/// How often a shard reports that its flushes keep failing (and, once
/// they work again, that they resumed).
pub(crate) const FLUSH_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(crate) struct ShardFiler {
    pub(crate) filer: Arc<dyn Filer>,
    uploads: FilerLane,
    reads: FilerLane,
    cache: RefCell<ChunkCache>,
    flush_errors: RefCell<LogLimit>,
    flush_resumes: RefCell<LogLimit>,
    /// The shard's figures: lane times here, flushes in the flusher.
    pub(crate) metrics: Arc<ShardMetrics>,
}

impl ShardFiler {
    /// Shard `shard`'s lanes to `filer`, and its share of the broker's
    /// chunk cache (none when the filer keeps its objects as local files:
    /// the page cache holds those).
    pub(crate) fn start(
        shard: usize,
        filer: Arc<dyn Filer>,
        config: &BrokerConfig,
        metrics: Arc<ShardMetrics>,
    ) -> std::io::Result<ShardFiler> {
        let cache_bytes = if filer.keeps_local_files() {
            0
        } else {
            config.chunk_cache_bytes / config.shard_count() as u64
        };
        Ok(ShardFiler {
            uploads: FilerLane::start(
                &format!("kelp-up-{shard}"),
                config.filer_uploads,
                filer.clone(),
            )?,
            reads: FilerLane::start(
                &format!("kelp-read-{shard}"),
                config.filer_reads,
                Arc::new(filer::RetriedReads::new(filer.clone())),
            )?,
            filer,
            cache: RefCell::new(ChunkCache::new(cache_bytes)),
            flush_errors: RefCell::new(LogLimit::new(FLUSH_ERROR_LOG_INTERVAL)),
            flush_resumes: RefCell::new(LogLimit::new(FLUSH_ERROR_LOG_INTERVAL)),
            metrics,
        })
    }

    /// Make a call that stores (a chunk, a marker) on the upload lane.
    pub(crate) async fn upload<R: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn Filer) -> R + Send + 'static,
    ) -> R {
        let started = Instant::now();
        let result = self.uploads.run(call).await;
        self.metrics.filer_upload.observe(started.elapsed());
        result
    }

    /// Make a call that reads (a range, a listing, a size) on the read lane,
    /// where a read failing with an I/O error is tried again (`RetriedReads`).
    pub(crate) async fn read<R: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn Filer) -> R + Send + 'static,
    ) -> R {
        let started = Instant::now();
        let result = self.reads.run(call).await;
        self.metrics.filer_read.observe(started.elapsed());
        result
    }

    /// `len` bytes of `path` from `offset`, after `room` zero bytes; from
    /// the cache where it has them, the missing blocks read in parallel
    /// and kept.
    pub(crate) async fn read_range_after(
        self: &Rc<Self>,
        room: usize,
        path: &ObjectPath,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ServeError> {
        let short = |path: &ObjectPath| {
            ServeError::new(
                ErrorCode::Storage,
                format!("chunk {path} is shorter than its header says"),
            )
        };
        if !self.cache.borrow().is_enabled() || len == 0 {
            let path = path.clone();
            return self
                .read(move |filer| {
                    let mut buf = vec![0u8; room + len];
                    match read_full(filer, &path, offset, &mut buf[room..])? {
                        n if n == len => Ok(buf),
                        _ => Err(short(&path)),
                    }
                })
                .await;
        }
        let end = offset + len as u64;
        let first = offset / CHUNK_CACHE_BLOCK_BYTES;
        let last = (end - 1) / CHUNK_CACHE_BLOCK_BYTES;
        let mut blocks: Vec<Option<Block>> = {
            let mut cache = self.cache.borrow_mut();
            (first..=last).map(|b| cache.get(path, b)).collect()
        };
        let reads: Vec<_> = (first..=last)
            .zip(&blocks)
            .filter(|(_, cached)| cached.is_none())
            .map(|(b, _)| {
                let (me, path) = (self.clone(), path.clone());
                let task = glommio::spawn_local(async move {
                    me.read(move |filer| {
                        let mut bytes = vec![0u8; CHUNK_CACHE_BLOCK_BYTES as usize];
                        let n = read_full(filer, &path, b * CHUNK_CACHE_BLOCK_BYTES, &mut bytes)?;
                        bytes.truncate(n);
                        Ok::<_, ServeError>(bytes)
                    })
                    .await
                });
                (b, task)
            })
            .collect();
        for (b, task) in reads {
            let block = Rc::new(task.await?);
            self.cache.borrow_mut().insert(path, b, block.clone());
            blocks[(b - first) as usize] = Some(block);
        }
        let mut out = vec![0u8; room + len];
        for (b, block) in (first..).zip(&blocks) {
            let block = block.as_ref().ok_or_else(ServeError::internal)?;
            let block_start = b * CHUNK_CACHE_BLOCK_BYTES;
            let from = offset.max(block_start);
            let to = end.min(block_start + CHUNK_CACHE_BLOCK_BYTES);
            let piece = block
                .get((from - block_start) as usize..(to - block_start) as usize)
                .ok_or_else(|| short(path))?;
            let at = room + (from - offset) as usize;
            out[at..at + piece.len()].copy_from_slice(piece);
        }
        Ok(out)
    }

    /// Forget what the cache holds of the objects at and under `prefix`
    /// (a deleted topic's).
    pub(crate) fn forget(&self, prefix: &ObjectPath) {
        self.cache.borrow_mut().forget(prefix);
    }

    /// Whether a flush failure at `now` is logged, and how many failures
    /// of the shard's segments were held back before it.
    pub(crate) fn admit_flush_error(&self, now: Instant) -> Option<u64> {
        self.flush_errors.borrow_mut().admit(now)
    }

    /// Whether a segment's flush working again at `now` is logged.
    pub(crate) fn admit_flush_resume(&self, now: Instant) -> Option<u64> {
        self.flush_resumes.borrow_mut().admit(now)
    }
}

/// Read `buf.len()` bytes of `path` from `offset`, or up to its end: the
/// number read. One `read_at`: a filer's read is short only at the
/// object's end (the `Filer` contract), and asking again there costs a
/// remote store two more requests (a range past the end, refused, then
/// the object's size) for every block a reader of small chunks reads.
fn read_full(
    filer: &dyn Filer,
    path: &ObjectPath,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize, ServeError> {
    filer
        .read_at(path, offset, buf)
        .map_err(|e| ServeError::new(ErrorCode::Storage, e.to_string()))
}
