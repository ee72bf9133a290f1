//! A shard's inbox: the work the Kafka gateway's thread (the one thread
//! that serves clients and is not a shard's own) hands to a shard, as typed
//! values: no frame is encoded to cross threads and decoded again. Each
//! request carries its own reply channel, and a shard answers every one it
//! takes. The inbox is a bounded channel, so a busy shard pushes back on
//! the gateway; a request that cannot be delivered (the shard is gone)
//! comes back to its sender as the channel's error.

use std::rc::Rc;
use std::time::Instant;

use wire::batch::BatchView;
use wire::{AckMode, FetchRequest};

use crate::request::{append, not_applied, start_fetch, Appended, Origin};
use crate::segment::FetchResult;
use crate::serve_error::ServeError;
use crate::shard::Shard;

/// Work for a shard, from a thread that is not its own.
#[derive(Debug)]
pub(crate) enum ShardRequest {
    /// Append `batch` (a kelp batch, validated again by the shard) to
    /// `segment` of `topic`; answered once `ack` holds: `None` at once with
    /// no offsets, `Leader` once appended, `Durable` once in the filer.
    Produce {
        topic: String,
        segment: u32,
        ack: AckMode,
        batch: Vec<u8>,
        reply: flume::Sender<Result<Option<Produced>, ServeError>>,
    },
    /// Read a segment as `request` asks. The answer's batches stay where
    /// they are (a buffer's or a chunk file's mapping) for the sender to
    /// read.
    Fetch {
        request: FetchRequest,
        reply: flume::Sender<Result<FetchResult, ServeError>>,
    },
}

/// Where an appended batch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Produced {
    pub(crate) base_offset: u64,
    pub(crate) record_count: u32,
}

impl ShardRequest {
    /// Answers the request with `error`, applying nothing.
    fn refuse(self, error: ServeError) {
        // The reply channel has room for its one answer: a failed send
        // means the sender stopped waiting.
        match self {
            ShardRequest::Produce { reply, .. } => drop(reply.try_send(Err(error))),
            ShardRequest::Fetch { reply, .. } => drop(reply.try_send(Err(error))),
        }
    }
}

/// The shard side: handle requests from the inbox until every sender is
/// gone. Each reply channel has room for its one answer, so `try_send`
/// fails only if the sender stopped waiting.
pub(crate) async fn inbox_loop(shard: Rc<Shard>, inbox: flume::Receiver<ShardRequest>) {
    while let Ok(request) = inbox.recv_async().await {
        if shard.stopping.get() {
            request.refuse(not_applied());
            continue;
        }
        match request {
            ShardRequest::Produce {
                topic,
                segment,
                ack,
                batch,
                reply,
            } => {
                // Appended inline, before the next request is taken: the
                // gateway's order of produces to a partition is kept.
                let arrived = Instant::now();
                let metrics = shard.metrics.clone();
                let appended = match BatchView::validate(&batch) {
                    Ok(view) => append(&shard, &topic, segment, &view, Origin::KafkaGateway).await,
                    Err(e) => Err(ServeError::from(&e)),
                };
                let Appended {
                    cell,
                    base_offset,
                    next_offset,
                } = match appended {
                    Ok(appended) => appended,
                    Err(e) => {
                        metrics.produce_errors.add(1);
                        let _ = reply.try_send(Err(e));
                        continue;
                    }
                };
                let produced = Produced {
                    base_offset,
                    record_count: (next_offset - base_offset) as u32,
                };
                match ack {
                    AckMode::None => {
                        metrics.produce(ack).observe(arrived.elapsed());
                        let _ = reply.try_send(Ok(None));
                    }
                    // Every replica's buffer: a segment's one replica is
                    // its owner.
                    AckMode::Leader | AckMode::All => {
                        metrics.produce(ack).observe(arrived.elapsed());
                        let _ = reply.try_send(Ok(Some(produced)));
                    }
                    AckMode::Durable => {
                        glommio::spawn_local(async move {
                            // No cell: a resend a sealed segment held, in
                            // the filer already (never the gateway's).
                            let flushed = match &cell {
                                Some(cell) => cell.wait_flushed(next_offset).await,
                                None => Ok(()),
                            };
                            match flushed {
                                Ok(()) => metrics.produce(ack).observe(arrived.elapsed()),
                                Err(_) => metrics.produce_errors.add(1),
                            }
                            let _ = reply.try_send(
                                flushed
                                    .map(|()| Some(produced))
                                    .map_err(|e| ServeError::storage(&e)),
                            );
                        })
                        .detach();
                    }
                }
            }
            ShardRequest::Fetch { request, reply } => {
                match start_fetch(&shard, request, Origin::KafkaGateway) {
                    Ok(read) => {
                        glommio::spawn_local(async move {
                            let _ = reply.try_send(read.await);
                        })
                        .detach();
                    }
                    Err(e) => {
                        let _ = reply.try_send(Err(e));
                    }
                }
            }
        }
    }
}
