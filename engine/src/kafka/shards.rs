//! Reaching the shards: a native request frame through the owning shard's
//! bounded inbox, the answer back through a one-slot reply channel.

use std::cell::Cell;

use wire::frame::{FrameHeader, FRAME_HEADER_BYTES};
use wire::{ErrorCode, Response};

use crate::inbox::InboxFrame;
use crate::request::Origin;
use crate::serve_error::ServeError;

pub(crate) struct Shards {
    inboxes: Vec<flume::Sender<InboxFrame>>,
    next_request_id: Cell<u32>,
}

/// A shard's answer: the response frame's bytes (empty for a produce with
/// ack `none`, which has no answer).
pub(crate) struct Answer(Vec<u8>);

impl Answer {
    /// The decoded response, `None` for no answer. A native error answer
    /// becomes `Err`.
    pub(crate) fn response(&self) -> Result<Option<Response<'_>>, ServeError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let bad = |why: String| ServeError::new(ErrorCode::Internal, why);
        let Some(header) = self.0.first_chunk::<FRAME_HEADER_BYTES>() else {
            return Err(bad("short answer from a shard".into()));
        };
        let header = FrameHeader::decode(header).map_err(|e| bad(e.to_string()))?;
        let response = Response::decode(header.frame_type, &self.0[FRAME_HEADER_BYTES..])
            .map_err(|e| bad(e.to_string()))?;
        match response {
            Response::Error { code, message } => Err(ServeError::new(code, message)),
            r => Ok(Some(r)),
        }
    }
}

impl Shards {
    pub(crate) fn new(inboxes: Vec<flume::Sender<InboxFrame>>) -> Shards {
        Shards {
            inboxes,
            next_request_id: Cell::new(1),
        }
    }

    /// Send `request` to shard `shard` and wait for its answer.
    pub(crate) async fn call(
        &self,
        shard: u16,
        request: &wire::Request<'_>,
    ) -> Result<Answer, ServeError> {
        let gone = || ServeError::new(ErrorCode::Internal, "the shard is shutting down");
        let Some(inbox) = self.inboxes.get(usize::from(shard)) else {
            return Err(ServeError::new(
                ErrorCode::NotOwner,
                format!("no shard {shard} in this broker"),
            ));
        };
        let id = self.next_request_id.get();
        self.next_request_id.set(id.wrapping_add(1));
        let mut frame = Vec::new();
        request.encode(id, &mut frame);
        let Some(header) = frame.first_chunk::<FRAME_HEADER_BYTES>() else {
            return Err(gone());
        };
        let header = FrameHeader::decode(header)
            .map_err(|e| ServeError::new(ErrorCode::Internal, e.to_string()))?;
        frame.drain(..FRAME_HEADER_BYTES);
        let (reply_tx, reply_rx) = flume::bounded(1);
        let item = InboxFrame {
            header,
            payload: frame,
            reply: reply_tx,
            origin: Origin::KafkaGateway,
            _budget: None,
        };
        inbox.send_async(item).await.map_err(|_| gone())?;
        let answer = reply_rx.recv_async().await.map_err(|_| gone())?;
        Ok(Answer(answer))
    }
}
