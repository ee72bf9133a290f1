//! One QUIC connection on the shard: quinn-proto's `Connection`, the one
//! bidirectional stream the client opens, the frames cut from it and the
//! answers written back to it, its receive window (paid from the shard's
//! receive budget, sized by [`WindowPolicy`]), and how the connection
//! ends. It does no I/O: the driver feeds it datagrams and timeouts and
//! sends what it queues.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn_proto::{
    ConnectionHandle, Dir, Event, ReadError, StreamEvent, StreamId, VarInt, WriteError,
};
use wire::frame::FRAME_HEADER_BYTES;
use wire::{Frame, FrameDecoder};

use super::requests::{Inbound, Requests};
use super::window::{WindowChange, WindowLimits, WindowPolicy, WindowReservation};
use crate::receive_budget::{ReceiveBudget, ReceivePermit};
use crate::request::error_frame;
use crate::serve_error::ServeError;

/// After the server finished its side of the stream, how long it waits for
/// the client to acknowledge the last answers before it closes anyway.
const FINISH_LINGER: Duration = Duration::from_secs(2);
/// Application close codes.
const CLOSE_DONE: u32 = 0;
const CLOSE_BAD_FRAME: u32 = 1;
const CLOSE_STREAM_RESET: u32 = 2;
/// Sent to streams beyond the first: kelp uses one stream per connection.
const EXTRA_STREAM_REFUSED: u32 = 3;

pub(super) struct QuicConnection {
    pub(super) handle: ConnectionHandle,
    pub(super) connection: quinn_proto::Connection,
    pub(super) requests: Rc<Requests>,
    in_flight_max: usize,
    /// The shard's receive budget, which every payload is read into room of.
    budget: Rc<ReceiveBudget>,
    stream: Option<StreamId>,
    /// Cuts frames from the stream; a payload is read only into room
    /// taken from the shard's receive budget first.
    reader: FrameDecoder,
    /// The current payload's room in the budget, once taken.
    permit: Option<ReceivePermit>,
    /// The receive window's size, and its room in the budget.
    window: ConnectionWindow,
    /// False once the stream ended, was reset or broke its framing.
    reading: bool,
    recv_finished: bool,
    /// Bytes of the front outbound answer already written to the stream.
    written: usize,
    send_finished: bool,
    /// When to close if the client has not acknowledged our finished side.
    close_at: Option<Instant>,
    /// How the connection ends once our side is finished.
    close_code: (u32, &'static str),
    /// The instant of this connection's entry in the driver's timer queue.
    pub(super) timer_armed: Option<Instant>,
    /// Its count against `connections_per_ip_max`, given back on drop.
    _peer: crate::peer_limit::PeerSlot,
}

impl QuicConnection {
    pub(super) fn new(
        handle: ConnectionHandle,
        connection: quinn_proto::Connection,
        requests: Rc<Requests>,
        in_flight_max: usize,
        budget: Rc<ReceiveBudget>,
        window: ConnectionWindow,
        peer: crate::peer_limit::PeerSlot,
    ) -> QuicConnection {
        QuicConnection {
            handle,
            connection,
            requests,
            in_flight_max,
            budget,
            stream: None,
            reader: FrameDecoder::new(),
            permit: None,
            window,
            reading: true,
            recv_finished: false,
            written: 0,
            send_finished: false,
            close_at: None,
            close_code: (CLOSE_DONE, "done"),
            timer_armed: None,
            _peer: peer,
        }
    }

    /// The payload bytes this connection waits to have room for in the
    /// shard's receive budget before it reads on.
    pub(super) fn room_needed(&self) -> Option<u64> {
        if self.reading && !self.connection.is_closed() {
            self.reader.room_needed().map(u64::from)
        } else {
            None
        }
    }

    /// The connection's receive window now.
    #[cfg(test)]
    pub(super) fn window_bytes(&self) -> u64 {
        self.window.policy.window_bytes()
    }

    /// The broker is stopping: the goodbye goes after the answers already
    /// queued, frames read from now on are answered not-applied, and the
    /// connection closes `linger` from now if its client has not ended it.
    pub(super) fn say_goodbye(&mut self, now: Instant, linger: Duration) {
        self.requests.say_goodbye();
        let at = now + linger;
        self.close_at = Some(self.close_at.map_or(at, |c| c.min(at)));
    }

    /// The earliest instant this connection needs a turn without input.
    pub(super) fn next_timeout(&mut self) -> Option<Instant> {
        match (self.connection.poll_timeout(), self.close_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// One turn of protocol work: timers, application events, reading
    /// frames, writing answers, ending. Endpoint events are the driver's.
    pub(super) fn drive(&mut self, now: Instant) {
        if self.connection.poll_timeout().is_some_and(|at| at <= now) {
            self.connection.handle_timeout(now);
        }
        if self.close_at.is_some_and(|at| at <= now) {
            let (code, reason) = self.close_code;
            self.close(now, code, reason);
        }
        while let Some(event) = self.connection.poll() {
            match event {
                Event::ConnectionLost { reason } => {
                    log::debug!("QUIC connection {:?} lost: {reason}", self.handle);
                    self.reading = false;
                    self.close_at = None;
                    self.requests.close();
                }
                Event::Stream(StreamEvent::Finished { id }) if Some(id) == self.stream => {
                    // Every answer, and the FIN, reached the client.
                    let (code, reason) = self.close_code;
                    self.close(now, code, reason);
                }
                Event::Stream(StreamEvent::Stopped { id, .. }) if Some(id) == self.stream => {
                    // The client no longer reads answers: nothing left to do.
                    self.close(now, CLOSE_DONE, "answers stopped by client");
                }
                // Readable, Writable and Opened need no bookkeeping: every
                // turn tries to accept, read and write.
                _ => {}
            }
        }
        if self.connection.is_closed() {
            return;
        }
        if let Some(change) = self.window.policy.review(now) {
            self.window.apply(change, &mut self.connection);
        }
        self.accept_streams();
        self.read_frames(now);
        self.write_answers(now);
        self.finish_if_done(now);
    }

    fn close(&mut self, now: Instant, code: u32, reason: &'static str) {
        self.reading = false;
        self.close_at = None;
        self.requests.close();
        if !self.connection.is_closed() {
            self.connection.close(
                now,
                VarInt::from_u32(code),
                Bytes::from_static(reason.as_bytes()),
            );
        }
    }

    /// The first bidirectional stream carries the requests; others are
    /// refused in both directions.
    fn accept_streams(&mut self) {
        while let Some(id) = self.connection.streams().accept(Dir::Bi) {
            if self.stream.is_none() {
                self.stream = Some(id);
                continue;
            }
            let code = VarInt::from_u32(EXTRA_STREAM_REFUSED);
            let _ = self.connection.recv_stream(id).stop(code);
            let _ = self.connection.send_stream(id).reset(code);
        }
    }

    fn read_frames(&mut self, now: Instant) {
        let Some(id) = self.stream else {
            return;
        };
        if !self.reading || self.requests.in_flight() >= self.in_flight_max {
            // At the limit nothing is read, so no flow-control credit goes
            // back and the client's window closes: QUIC's backpressure.
            return;
        }
        let mut recv = self.connection.recv_stream(id);
        let mut chunks = match recv.read(true) {
            Ok(chunks) => chunks,
            Err(_) => {
                self.reading = false;
                return;
            }
        };
        let mut reset = false;
        // Bytes taken from quinn-proto, and whole frames handed on.
        let mut read_bytes = 0u64;
        let mut delivered_bytes = 0u64;
        while self.requests.in_flight() < self.in_flight_max {
            if let Some(bytes) = self.reader.room_needed() {
                let Some(permit) = self.budget.try_take(u64::from(bytes)) else {
                    // No room among the shard's frames: read nothing more,
                    // so no credit goes back; the server gives this
                    // connection a turn when bytes come back.
                    break;
                };
                self.permit = Some(permit);
                if let Some(frame) = self.reader.admit() {
                    delivered_bytes += push_frame(&self.requests, &mut self.permit, frame);
                }
                continue;
            }
            let cut = match chunks.next(self.reader.unfilled().len()) {
                Ok(Some(chunk)) => {
                    read_bytes += chunk.bytes.len() as u64;
                    let mut bytes = &chunk.bytes[..];
                    let cut = self.reader.push(&mut bytes);
                    debug_assert!(bytes.is_empty(), "a chunk longer than asked for");
                    cut
                }
                Ok(None) => {
                    self.reading = false;
                    self.recv_finished = true;
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => {
                    log::debug!("QUIC connection {:?}: stream reset {code}", self.handle);
                    reset = true;
                    break;
                }
            };
            match cut {
                Ok(None) => {}
                Ok(Some(frame)) => {
                    delivered_bytes += push_frame(&self.requests, &mut self.permit, frame);
                }
                Err(e) => {
                    // The stream cannot be resynchronised: answer and close
                    // once the answers before it are written.
                    log::warn!("QUIC connection {:?}: closing: {e}", self.handle);
                    self.requests
                        .push(Inbound::Fatal(error_frame(0, &ServeError::from(&e))));
                    self.reading = false;
                    break;
                }
            }
        }
        // finalize() queues MAX_STREAM_DATA/MAX_DATA for the bytes taken;
        // the driver transmits after every turn, so the credit goes out.
        let _ = chunks.finalize();
        self.window.on_read(read_bytes);
        if delivered_bytes > 0 {
            let free = self.budget.free();
            if let Some(change) = self.window.policy.on_delivered(now, delivered_bytes, free) {
                self.window.apply(change, &mut self.connection);
            }
        }
        if reset {
            self.close(now, CLOSE_STREAM_RESET, "stream reset");
        }
    }

    fn write_answers(&mut self, now: Instant) {
        let Some(id) = self.stream else {
            return;
        };
        if self.send_finished {
            return;
        }
        let mut written_answers = 0;
        let mut failed = false;
        {
            let mut outbound = self.requests.outbound();
            while let Some(front) = outbound.front() {
                match self
                    .connection
                    .send_stream(id)
                    .write(&front[self.written..])
                {
                    Ok(n) => {
                        self.written += n;
                        if self.written < front.len() {
                            // Flow control or congestion: a Writable event
                            // or the next turn resumes.
                            break;
                        }
                        outbound.pop_front();
                        self.written = 0;
                        written_answers += 1;
                    }
                    Err(WriteError::Blocked) => break,
                    Err(WriteError::Stopped(_) | WriteError::ClosedStream) => {
                        failed = true;
                        break;
                    }
                }
            }
        }
        if written_answers > 0 {
            self.requests.release(written_answers);
        }
        if failed {
            self.close(now, CLOSE_DONE, "answers stopped by client");
        }
    }

    /// Finishes our side of the stream once nothing more will be answered:
    /// after a fatal frame's answer, or after the client's FIN once every
    /// request is answered. The connection closes when the client has
    /// acknowledged everything (`Finished`) or after `FINISH_LINGER`.
    fn finish_if_done(&mut self, now: Instant) {
        let Some(id) = self.stream else {
            return;
        };
        if self.send_finished || !self.requests.outbound().is_empty() || self.written > 0 {
            return;
        }
        let fatal = self.requests.is_fatal();
        if !(fatal || (self.recv_finished && self.requests.in_flight() == 0)) {
            return;
        }
        self.send_finished = true;
        if self.connection.send_stream(id).finish().is_err() {
            self.close(now, CLOSE_DONE, "done");
            return;
        }
        self.close_at = Some(now + FINISH_LINGER);
        if fatal {
            // Take nothing else: answers still pending are dropped, as on TCP.
            self.requests.close();
            self.close_code = (CLOSE_BAD_FRAME, "bad frame");
        }
    }
}

/// Hands a whole frame, with its room in the budget, to the handler: its
/// bytes on the stream.
fn push_frame(requests: &Requests, permit: &mut Option<ReceivePermit>, frame: Frame) -> u64 {
    let bytes = (FRAME_HEADER_BYTES + frame.payload.len()) as u64;
    requests.push(Inbound::Frame {
        header: frame.header,
        payload: frame.payload,
        permit: permit.take(),
    });
    bytes
}

/// One connection's receive window: what quinn-proto may hold for it
/// unread. Its bytes are held in the shard's receive budget for as long as
/// the peer may have them outstanding, and given back when the connection
/// is dropped.
pub(super) struct ConnectionWindow {
    policy: WindowPolicy,
    reservation: WindowReservation,
    /// `reservation.bytes()` of the shard's receive budget.
    permit: ReceivePermit,
}

impl ConnectionWindow {
    /// A new connection's smallest window, reserved from `budget` now, or
    /// `None` when the budget has no room for it (the connection is to be
    /// refused). quinn-proto's `TransportConfig::receive_window` must be
    /// the same minimum (`tls::server_config`).
    pub(super) fn reserve(
        budget: &Rc<ReceiveBudget>,
        limits: WindowLimits,
        now: Instant,
    ) -> Option<ConnectionWindow> {
        let policy = WindowPolicy::new(limits, now);
        let reservation = WindowReservation::new(policy.window_bytes());
        let permit = budget.try_take(reservation.bytes())?;
        Some(ConnectionWindow {
            policy,
            reservation,
            permit,
        })
    }

    /// Reserves or schedules the release of the bytes of `change`, then
    /// gives quinn-proto the new window.
    fn apply(&mut self, change: WindowChange, connection: &mut quinn_proto::Connection) {
        let to = match change {
            WindowChange::Grow { from, to } => {
                if !self.permit.try_grow(to - from) {
                    // The policy grows only into room it was told is free.
                    debug_assert!(false, "a window grew past the free budget");
                    self.policy.undo(change);
                    return;
                }
                to
            }
            WindowChange::Shrink { to, .. } => to,
        };
        self.reservation.apply(change);
        debug_assert_eq!(self.permit.bytes(), self.reservation.bytes());
        // Windows are at most WINDOW_BYTES_MAX, far below VarInt::MAX.
        connection.set_receive_window(VarInt::from_u64(to).unwrap_or(VarInt::MAX));
    }

    /// The connection read `bytes` from quinn-proto: credit given under a
    /// larger window that this pays off goes back to the budget.
    fn on_read(&mut self, bytes: u64) {
        let paid = self.reservation.on_read(bytes);
        self.permit.shrink(paid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_reserved_from_the_budget_or_not_at_all() {
        let now = Instant::now();
        let limits = WindowLimits::BROKER;
        let budget = ReceiveBudget::new(limits.min_bytes * 2 - 1);
        let first = ConnectionWindow::reserve(&budget, limits, now);
        assert!(first.is_some());
        assert_eq!(budget.in_use(), limits.min_bytes);
        // No room for a second: it is refused, and nothing is taken.
        assert!(ConnectionWindow::reserve(&budget, limits, now).is_none());
        assert_eq!(budget.in_use(), limits.min_bytes);
        drop(first);
        assert_eq!(budget.in_use(), 0);
    }
}
