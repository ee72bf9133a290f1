//! Reaching the shards: a native request frame through the owning shard's
//! bounded inbox, the answer back through a one-slot reply channel.

use std::cell::Cell;

use wire::batch::BatchHead;
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

/// `request`'s frame header and payload, the payload in a `Vec` of its
/// own (the inbox carries them apart).
fn encode(id: u32, request: &wire::Request<'_>) -> Result<(FrameHeader, Vec<u8>), ServeError> {
    let internal = |e: String| ServeError::new(ErrorCode::Internal, e);
    if let wire::Request::Produce {
        topic,
        segment,
        ack,
        batch,
    } = *request
    {
        // A produce's batch (~1 MB from a Kafka client) is its payload's
        // last field, unframed (wire::message): encode the rest alone and
        // copy the batch once, after it, instead of encoding the whole
        // frame and then moving the payload down over its header.
        let mut head = Vec::new();
        wire::Request::Produce {
            topic,
            segment,
            ack,
            batch: &[],
        }
        .encode(id, &mut head);
        let fields = head.get(FRAME_HEADER_BYTES..).unwrap_or_default();
        let mut payload = Vec::with_capacity(fields.len() + batch.len());
        payload.extend_from_slice(fields);
        payload.extend_from_slice(batch);
        // The gateway built the batch and its checksum a moment ago: a
        // large one's frame checksum is folded from it instead of read
        // again (the shard still checks the batch against it, once).
        let header = match BatchHead::stated_checksum(batch) {
            Some(crc) => FrameHeader::for_split(request.frame_type(), id, fields, crc, batch.len()),
            None => FrameHeader::for_payload(request.frame_type(), id, &payload),
        };
        return Ok((header, payload));
    }
    let mut frame = Vec::new();
    request.encode(id, &mut frame);
    let Some(header) = frame.first_chunk::<FRAME_HEADER_BYTES>() else {
        return Err(internal("a request frame shorter than its header".into()));
    };
    let header = FrameHeader::decode(header).map_err(|e| internal(e.to_string()))?;
    frame.drain(..FRAME_HEADER_BYTES);
    Ok((header, frame))
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
        let (header, payload) = encode(id, request)?;
        let (reply_tx, reply_rx) = flume::bounded(1);
        let item = InboxFrame {
            header,
            payload,
            reply: reply_tx,
            origin: Origin::KafkaGateway,
            _budget: None,
        };
        inbox.send_async(item).await.map_err(|_| gone())?;
        let answer = reply_rx.recv_async().await.map_err(|_| gone())?;
        Ok(Answer(answer))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The split encoding is the whole frame's: same header, same payload.
    #[test]
    fn a_produce_frame_is_encoded_as_wire_encodes_it() {
        let mut batch = wire::batch::BatchBuilder::new();
        batch.push(7, b"key", &[5u8; 3000], &[]).unwrap();
        let requests = [
            wire::Request::Produce {
                topic: "kafka/t",
                segment: 3,
                ack: wire::AckMode::Leader,
                batch: batch.finish(0, 0),
            },
            wire::Request::DescribeTopic {
                topic: "kafka/t".into(),
            },
        ];
        for request in &requests {
            let mut whole = Vec::new();
            request.encode(42, &mut whole);
            let (header, payload) = encode(42, request).unwrap();
            assert_eq!(header.encode()[..], whole[..FRAME_HEADER_BYTES]);
            assert_eq!(payload, whole[FRAME_HEADER_BYTES..]);
            header.verify_payload(&payload).unwrap();
        }
    }
}
