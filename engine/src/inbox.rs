//! A shard's inbox: native request frames from the one thread that is not
//! a shard's own and serves clients (the Kafka gateway), handled on the
//! shard and answered through the sender's reply channel. The inbox is a
//! bounded channel, so a busy shard pushes back on the gateway.

use std::rc::Rc;

use wire::frame::FrameHeader;

use crate::request::{handle_frame, not_applied_frame, Origin, Reply};
use crate::shard::Shard;

/// A frame on its way to a shard (verified there), with where to send the answer.
/// An empty answer means "no answer" and only frees the sender's slot.
#[derive(Debug)]
pub(crate) struct InboxFrame {
    pub(crate) header: FrameHeader,
    pub(crate) payload: Vec<u8>,
    pub(crate) reply: flume::Sender<Vec<u8>>,
    /// Who sent it. Only broker threads build inbox frames, so a peer can
    /// never claim the gateway's origin.
    pub(crate) origin: Origin,
    /// The payload's share of the sender's byte budget, returned when the
    /// shard drops the frame.
    pub(crate) _budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The shard side: handle frames from the inbox until every sender is gone.
pub(crate) async fn inbox_loop(shard: Rc<Shard>, inbox: flume::Receiver<InboxFrame>) {
    while let Ok(frame) = inbox.recv_async().await {
        // The reply channel has room for every in-flight request of its
        // connection, so `try_send` fails only if the connection is gone.
        if shard.stopping.get() {
            // Flushed and stopping: applied nothing, and says so (the
            // sender's connection is saying goodbye).
            let _ = frame
                .reply
                .try_send(not_applied_frame(frame.header.request_id));
            continue;
        }
        match handle_frame(&shard, &frame.header, &frame.payload, frame.origin).await {
            Reply::Silent => {
                let _ = frame.reply.try_send(Vec::new());
            }
            Reply::Now(answer) => {
                let _ = frame.reply.try_send(answer);
            }
            Reply::Later(future) => {
                let reply = frame.reply;
                glommio::spawn_local(async move {
                    let _ = reply.try_send(future.await);
                })
                .detach();
            }
            Reply::Fetched(future) => {
                let reply = frame.reply;
                glommio::spawn_local(async move {
                    let _ = reply.try_send(future.await.into_frame());
                })
                .detach();
            }
        }
    }
}
