//! Waking a reader of a large frame once, not once per arriving segment.
//!
//! A reader that waits for bytes is woken by the kernel each time some
//! arrive. On loopback, and on any host where the sender and the reader
//! share CPUs, the sender's thread runs those wake-ups: a broker sending a
//! 4 MiB fetch answer with `sendfile` spent most of its CPU waking the
//! reader (`kelp bench consume`: 0.55 against 0.15 broker CPU s/GB, in
//! BENCHMARKS.md). `SO_RCVLOWAT` tells the kernel to wake the reader only
//! once it holds that many bytes. It must never ask for more than the peer
//! will send, or the reader waits forever: the caller states what is left
//! of the frame it is reading before each read that may wait.

use std::io;
use std::os::unix::io::RawFd;

/// The most bytes a reader asks the kernel to gather before it wakes. The
/// kernel grows the socket's receive buffer to hold it.
pub const RECEIVE_LOW_WATER_BYTES_MAX: usize = 1 << 20;

/// A socket's `SO_RCVLOWAT`, as this reader last set it.
#[derive(Debug)]
pub struct ReceiveLowWater {
    /// `None` for streams that are not a TCP socket (QUIC, tests): then
    /// nothing is ever set.
    socket: Option<RawFd>,
    bytes: usize,
}

impl ReceiveLowWater {
    /// For a socket the caller reads from (and keeps open while this
    /// lives), or `None`.
    pub fn new(socket: Option<RawFd>) -> ReceiveLowWater {
        ReceiveLowWater { socket, bytes: 1 }
    }

    /// Before a read that may wait, when exactly `remaining` bytes of the
    /// frame being read have yet to come from the socket (none buffered
    /// in user space): wake at `min(remaining, RECEIVE_LOW_WATER_BYTES_MAX)`.
    /// `remaining` 0 or 1 (between frames) wakes on any byte.
    pub fn expect(&mut self, remaining: usize) -> io::Result<()> {
        let Some(fd) = self.socket else {
            return Ok(());
        };
        let bytes = remaining.clamp(1, RECEIVE_LOW_WATER_BYTES_MAX);
        if bytes == self.bytes {
            return Ok(());
        }
        let value = bytes as libc::c_int;
        // SAFETY: `fd` is the caller's open socket (see `new`); the option
        // value is a c_int of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.bytes = bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::io::AsRawFd;

    fn low_water_of(fd: RawFd) -> usize {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a valid socket and an out-parameter of the right size.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        value as usize
    }

    #[test]
    fn asks_for_what_is_left_of_the_frame_at_most_its_limit_and_any_byte_between_frames() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut reader, _) = listener.accept().unwrap();
        let mut low = ReceiveLowWater::new(Some(reader.as_raw_fd()));
        low.expect(10 << 20).unwrap();
        assert_eq!(
            low_water_of(reader.as_raw_fd()),
            RECEIVE_LOW_WATER_BYTES_MAX
        );
        low.expect(5000).unwrap();
        assert_eq!(low_water_of(reader.as_raw_fd()), 5000);
        // The kernel holds 5000 bytes: the read wakes with all of them.
        sender.write_all(&[7u8; 5000]).unwrap();
        let mut buf = vec![0u8; 5000];
        reader.read_exact(&mut buf).unwrap();
        low.expect(0).unwrap();
        assert_eq!(low_water_of(reader.as_raw_fd()), 1);
    }

    #[test]
    fn a_stream_without_a_socket_sets_nothing() {
        let mut low = ReceiveLowWater::new(None);
        low.expect(1 << 20).unwrap();
    }
}
