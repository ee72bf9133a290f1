//! Reaching the shards: a typed request through the owning shard's bounded
//! inbox (`crate::inbox`), the answer back through a one-slot reply
//! channel. Nothing is encoded to cross the thread.

use wire::{AckMode, ErrorCode, FetchRequest};

use crate::inbox::{Produced, ShardRequest};
use crate::segment::FetchResult;
use crate::serve_error::ServeError;

pub(crate) struct Shards {
    inboxes: Vec<flume::Sender<ShardRequest>>,
}

fn gone() -> ServeError {
    ServeError::new(ErrorCode::Internal, "the shard is shutting down")
}

impl Shards {
    pub(crate) fn new(inboxes: Vec<flume::Sender<ShardRequest>>) -> Shards {
        Shards { inboxes }
    }

    fn inbox(&self, shard: u16) -> Result<&flume::Sender<ShardRequest>, ServeError> {
        self.inboxes.get(usize::from(shard)).ok_or_else(|| {
            ServeError::new(
                ErrorCode::NotOwner,
                format!("no shard {shard} in this broker"),
            )
        })
    }

    /// Append `batch` to `segment` of `topic` on `shard`, answered as `ack`
    /// says (`None` for ack `none`).
    pub(crate) async fn produce(
        &self,
        shard: u16,
        topic: String,
        segment: u32,
        ack: AckMode,
        batch: Vec<u8>,
    ) -> Result<Option<Produced>, ServeError> {
        self.ask(shard, |reply| ShardRequest::Produce {
            topic,
            segment,
            ack,
            batch,
            reply,
        })
        .await
    }

    /// Read a segment on `shard` as `request` asks.
    pub(crate) async fn fetch(
        &self,
        shard: u16,
        request: FetchRequest,
    ) -> Result<FetchResult, ServeError> {
        self.ask(shard, |reply| ShardRequest::Fetch { request, reply })
            .await
    }

    /// The request `make` builds around a reply channel, sent to `shard`,
    /// and its answer.
    async fn ask<T>(
        &self,
        shard: u16,
        make: impl FnOnce(flume::Sender<Result<T, ServeError>>) -> ShardRequest,
    ) -> Result<T, ServeError> {
        let (reply, answer) = flume::bounded(1);
        self.inbox(shard)?
            .send_async(make(reply))
            .await
            .map_err(|_| gone())?;
        answer.recv_async().await.map_err(|_| gone())?
    }
}
