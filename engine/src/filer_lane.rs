//! A filer lane: a few threads of a shard's own that make its filer calls,
//! so a store that answers slowly (S3 across a network) ties up those
//! threads and nothing else.
//!
//! A shard has two lanes, one for chunk uploads and one for chunk reads
//! (see `ShardFiler`), apart from glommio's blocking pool, which keeps the
//! shard's local work (spare buffers, mappings, scans). A hundred segments
//! waiting on a stalled bucket hold at most the upload lane's threads: the
//! other segments' reads, and the spare buffers their producers need, go
//! on.
//!
//! Work waits in a channel as deep as the lane has threads; a caller past
//! that waits to enqueue (its own task, on the shard, parked), so a lane
//! holds at most twice its threads in calls.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use filer::Filer;

/// One call for a lane thread to make.
type Job = Box<dyn FnOnce() + Send>;

/// Threads of one lane, at most.
pub(crate) const LANE_THREADS_MAX: usize = 64;

#[derive(Debug)]
pub(crate) struct FilerLane {
    jobs: flume::Sender<Job>,
    filer: Arc<dyn Filer>,
}

impl FilerLane {
    /// A lane of `threads` threads named `name-N` that call `filer`. They
    /// end when the lane is dropped and their last call returns.
    pub(crate) fn start(
        name: &str,
        threads: usize,
        filer: Arc<dyn Filer>,
    ) -> std::io::Result<FilerLane> {
        assert!((1..=LANE_THREADS_MAX).contains(&threads));
        let (jobs, queue) = flume::bounded::<Job>(threads);
        for i in 0..threads {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    while let Ok(job) = queue.recv() {
                        // A call that panics loses its answer (its caller
                        // panics on the shard); the thread stays.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                    }
                })?;
        }
        Ok(FilerLane { jobs, filer })
    }

    /// Make `call` on the filer on a lane thread and wait for its result.
    pub(crate) async fn run<R: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn Filer) -> R + Send + 'static,
    ) -> R {
        let (answer, answered) = flume::bounded(1);
        let filer = self.filer.clone();
        let job: Job = Box::new(move || {
            let _ = answer.send(call(filer.as_ref()));
        });
        self.jobs
            .send_async(job)
            .await
            .expect("a lane's threads live as long as the lane");
        answered
            .recv_async()
            .await
            .expect("a filer call panicked on its lane thread")
    }
}
