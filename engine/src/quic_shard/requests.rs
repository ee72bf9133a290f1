//! The requests of one QUIC connection between the driver and the task that
//! handles them: frames cut from the stream wait in `inbound`, answers wait
//! in `outbound` until the driver writes them to the stream. The task
//! handles frames one at a time in arrival order, so a connection's produce
//! requests are appended in the order they were sent (as over TCP).
//!
//! Every frame holds one in-flight slot from the moment it is cut from the
//! stream until its answer is written (or, for a silent answer, until it is
//! handled); the driver stops reading at `connection_requests_in_flight_max`.
//! Nothing here touches quinn-proto or the socket.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use event_listener::Event;
use quinn_proto::ConnectionHandle;
use wire::frame::FrameHeader;

use crate::receive_budget::ReceivePermit;
use crate::request::{goodbye_frame, handle_frame, not_applied_frame, Origin, Reply};
use crate::shard::Shard;
use crate::shard_metrics::Transport;

/// Connections that asked the driver for a turn. Each connection is listed
/// at most once (its `scheduled` flag), so the list is bounded by the
/// connection table.
#[derive(Default)]
pub(super) struct ReadyList {
    handles: RefCell<Vec<ConnectionHandle>>,
    /// Wakes the driver when it waits.
    pub(super) event: Event,
}

impl ReadyList {
    pub(super) fn schedule(&self, requests: &Requests) {
        if !requests.scheduled.replace(true) {
            self.handles.borrow_mut().push(requests.handle);
            self.event.notify(1);
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.handles.borrow().is_empty()
    }

    /// Takes the listed handles into `into` (cleared first).
    pub(super) fn take(&self, into: &mut Vec<ConnectionHandle>) {
        into.clear();
        std::mem::swap(&mut *self.handles.borrow_mut(), into);
    }
}

/// A unit of work for the handler task.
pub(super) enum Inbound {
    /// A whole frame whose header decoded; the payload is not verified yet.
    Frame {
        header: FrameHeader,
        payload: Vec<u8>,
        /// The payload's room in the shard's receive budget, given back
        /// once the frame is handled.
        permit: Option<ReceivePermit>,
    },
    /// The stream broke its framing: send this error frame and end.
    Fatal(Vec<u8>),
}

pub(super) struct Requests {
    pub(super) handle: ConnectionHandle,
    inbound: RefCell<VecDeque<Inbound>>,
    inbound_ready: Event,
    outbound: RefCell<VecDeque<Vec<u8>>>,
    in_flight: Cell<usize>,
    /// The handler answered a fatal frame: no more requests are taken.
    fatal: Cell<bool>,
    /// The goodbye is queued: frames cut from now on are answered
    /// not-applied without reaching the handler.
    goodbye: Cell<bool>,
    /// The connection is gone: the handler ends, answers are dropped.
    closed: Cell<bool>,
    /// Whether this connection is on the ready list.
    pub(super) scheduled: Cell<bool>,
    ready: Rc<ReadyList>,
}

impl Requests {
    pub(super) fn new(handle: ConnectionHandle, ready: Rc<ReadyList>) -> Requests {
        Requests {
            handle,
            inbound: RefCell::new(VecDeque::new()),
            inbound_ready: Event::new(),
            outbound: RefCell::new(VecDeque::new()),
            in_flight: Cell::new(0),
            fatal: Cell::new(false),
            goodbye: Cell::new(false),
            closed: Cell::new(false),
            scheduled: Cell::new(false),
            ready,
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    pub(super) fn is_fatal(&self) -> bool {
        self.fatal.get()
    }

    /// Called by the driver with a frame cut from the stream: takes a slot.
    pub(super) fn push(&self, item: Inbound) {
        if self.closed.get() {
            return;
        }
        self.in_flight.set(self.in_flight.get() + 1);
        match item {
            // Read after the goodbye: not applied, and the client is told.
            Inbound::Frame { header, .. } if self.goodbye.get() => {
                self.answer(not_applied_frame(header.request_id));
            }
            item => {
                self.inbound.borrow_mut().push_back(item);
                self.inbound_ready.notify(1);
            }
        }
    }

    /// Queues the goodbye (once), in a slot of its own past the in-flight
    /// bound, so writing it frees no slot of a request.
    pub(super) fn say_goodbye(&self) {
        if self.closed.get() || self.goodbye.replace(true) {
            return;
        }
        self.in_flight.set(self.in_flight.get() + 1);
        self.answer(goodbye_frame());
    }

    /// The next frame for the handler, if one waits (what the task's
    /// `next` takes, without waiting).
    #[cfg(test)]
    pub(super) fn try_next(&self) -> Option<Inbound> {
        self.inbound.borrow_mut().pop_front()
    }

    /// Queues an answer for the driver to write.
    pub(super) fn answer(&self, frame: Vec<u8>) {
        if self.closed.get() {
            return;
        }
        self.outbound.borrow_mut().push_back(frame);
        self.ready.schedule(self);
    }

    /// Frees `n` in-flight slots; the driver may read again.
    pub(super) fn release(&self, n: usize) {
        self.in_flight.set(self.in_flight.get().saturating_sub(n));
        self.ready.schedule(self);
    }

    /// The answers waiting to be written, oldest first.
    pub(super) fn outbound(&self) -> std::cell::RefMut<'_, VecDeque<Vec<u8>>> {
        self.outbound.borrow_mut()
    }

    /// Whether the connection is gone.
    #[cfg(test)]
    pub(super) fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// The connection is gone: drop what waits and end the handler.
    pub(super) fn close(&self) {
        self.closed.set(true);
        self.inbound.borrow_mut().clear();
        self.outbound.borrow_mut().clear();
        self.inbound_ready.notify(usize::MAX);
    }

    async fn next(&self) -> Option<Inbound> {
        loop {
            let listener = self.inbound_ready.listen();
            if self.closed.get() {
                return None;
            }
            if let Some(item) = self.inbound.borrow_mut().pop_front() {
                return Some(item);
            }
            listener.await;
        }
    }
}

/// The connection's handler task: verify, handle and answer each frame in
/// order, until the connection closes or breaks its framing.
pub(super) async fn handle_requests(shard: Rc<Shard>, requests: Rc<Requests>) {
    let mut session = crate::access::new_session(&shard);
    while let Some(item) = requests.next().await {
        match item {
            Inbound::Frame {
                header,
                payload,
                permit,
            } => {
                let reply = handle_frame(
                    &shard,
                    &header,
                    &payload,
                    Origin::Network(Transport::Quic),
                    &mut session,
                )
                .await;
                // Handled: the payload's bytes are in a buffer or answered.
                drop((payload, permit));
                match reply {
                    Reply::Silent => requests.release(1),
                    Reply::Now(frame) => requests.answer(frame),
                    Reply::Later(future) => {
                        let requests = requests.clone();
                        glommio::spawn_local(async move { requests.answer(future.await) }).detach();
                    }
                    Reply::Fetched(future) => {
                        let requests = requests.clone();
                        glommio::spawn_local(
                            async move { requests.answer(future.await.into_frame()) },
                        )
                        .detach();
                    }
                }
            }
            Inbound::Fatal(frame) => {
                requests.fatal.set(true);
                requests.answer(frame);
                return;
            }
        }
    }
}
