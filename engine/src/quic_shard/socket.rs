//! The shard's UDP socket for QUIC: non-blocking, with quinn-udp doing the
//! GRO/GSO/ECN/pktinfo syscalls, plus a readiness handle glommio can wait
//! on. It moves datagrams and nothing else; it never parses them.

use std::io::{self, IoSliceMut};
use std::net::UdpSocket;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::time::Duration;

use quinn_udp::{RecvMeta, UdpSocketState, BATCH_SIZE};

/// One receive slot: a GRO batch is one skb, and an skb carries at most
/// 64 KiB.
pub(super) const RECV_SLOT_BYTES: usize = 64 << 10;
/// Datagrams per GSO send: quinn's own cap (`MAX_TRANSMIT_SEGMENTS`).
const GSO_SEGMENTS_MAX: usize = 10;

const _: () = assert!(RECV_SLOT_BYTES >= u16::MAX as usize);

/// Which of the waits in [`QuicSocket::wait`] ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Woken {
    /// A datagram (or a queued ICMP error) is waiting.
    Readable,
    /// The timeout passed.
    Timeout,
    /// The other future given to `wait` completed.
    Other,
}

pub(super) struct QuicSocket {
    socket: UdpSocket,
    state: UdpSocketState,
    /// `BATCH_SIZE` slots of `RECV_SLOT_BYTES`, one per recvmmsg message.
    recv_buf: Vec<u8>,
    pub(super) metas: [RecvMeta; BATCH_SIZE],
    /// A dup of `socket` owned by glommio: a one-byte `MSG_PEEK` recvmsg on
    /// it through io_uring completes when a datagram is queued and consumes
    /// nothing. glommio exposes no fd readiness; this is readiness.
    readiness: glommio::net::UdpSocket,
}

impl Drop for QuicSocket {
    fn drop(&mut self) {
        // A readiness peek may still be queued in the shard's io_uring, and
        // it holds the socket open (and its port bound) until it completes;
        // shutting the socket down completes it now. An unconnected UDP
        // socket answers ENOTCONN but still wakes its readers.
        use std::os::unix::io::AsRawFd;
        // SAFETY: plain syscall on a descriptor this struct owns.
        unsafe {
            libc::shutdown(self.socket.as_raw_fd(), libc::SHUT_RDWR);
        }
    }
}

impl QuicSocket {
    pub(super) fn new(socket: UdpSocket) -> io::Result<QuicSocket> {
        // Sets O_NONBLOCK, UDP_GRO, IP_PKTINFO, IP_RECVTOS and no-fragment.
        let state = UdpSocketState::new((&socket).into())?;
        let dup = socket.try_clone()?;
        // SAFETY: `into_raw_fd` hands over sole ownership of a valid, open
        // descriptor, which the glommio socket then owns and closes.
        let readiness = unsafe { glommio::net::UdpSocket::from_raw_fd(dup.into_raw_fd()) };
        Ok(QuicSocket {
            socket,
            state,
            recv_buf: vec![0; RECV_SLOT_BYTES * BATCH_SIZE],
            metas: [RecvMeta::default(); BATCH_SIZE],
            readiness,
        })
    }

    /// Path MTU discovery is safe only where the kernel never fragments.
    pub(super) fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }

    pub(super) fn gso_segments_max(&self) -> usize {
        self.state.max_gso_segments().clamp(1, GSO_SEGMENTS_MAX)
    }

    /// One recvmmsg: the number of messages now in `metas` and their slots.
    pub(super) fn recv(&mut self) -> io::Result<usize> {
        let mut slots = self.recv_buf.chunks_mut(RECV_SLOT_BYTES);
        let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] = std::array::from_fn(|_| {
            // recv_buf is exactly BATCH_SIZE slots long.
            IoSliceMut::new(slots.next().unwrap_or_default())
        });
        self.state
            .recv((&self.socket).into(), &mut iovs, &mut self.metas)
    }

    /// The bytes of received message `index`.
    pub(super) fn slot(&self, index: usize) -> &[u8] {
        let len = self.metas[index].len.min(RECV_SLOT_BYTES);
        &self.recv_buf[index * RECV_SLOT_BYTES..][..len]
    }

    /// Only `WouldBlock` comes back as an error: quinn-udp logs and drops
    /// other send errors, since UDP loss is QUIC's to repair.
    pub(super) fn send(&self, transmit: &quinn_proto::Transmit, contents: &[u8]) -> io::Result<()> {
        let transmit = quinn_udp::Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn.map(udp_ecn),
            contents,
            segment_size: transmit.segment_size,
            src_ip: transmit.src_ip,
        };
        self.state.send((&self.socket).into(), &transmit)
    }

    /// Waits until the socket is readable, `timeout` passed, or `other`
    /// completed, whichever comes first.
    pub(super) async fn wait(
        &self,
        timeout: Duration,
        other: impl std::future::Future<Output = ()>,
    ) -> io::Result<Woken> {
        let mut probe = [0u8; 1];
        let readable = async {
            match self.readiness.peek_from(&mut probe).await {
                Ok(_) => Ok(Woken::Readable),
                Err(e) => {
                    let e = io::Error::from(e);
                    // Queued ICMP errors surface here too; the receive path
                    // skips them, so they count as readiness.
                    match e.kind() {
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset => {
                            Ok(Woken::Readable)
                        }
                        _ => Err(e),
                    }
                }
            }
        };
        let timer = async {
            glommio::timer::sleep(timeout).await;
            Ok(Woken::Timeout)
        };
        let other = async {
            other.await;
            Ok(Woken::Other)
        };
        futures_lite::future::or(readable, futures_lite::future::or(timer, other)).await
    }
}

pub(super) fn proto_ecn(ecn: quinn_udp::EcnCodepoint) -> quinn_proto::EcnCodepoint {
    match ecn {
        quinn_udp::EcnCodepoint::Ect0 => quinn_proto::EcnCodepoint::Ect0,
        quinn_udp::EcnCodepoint::Ect1 => quinn_proto::EcnCodepoint::Ect1,
        quinn_udp::EcnCodepoint::Ce => quinn_proto::EcnCodepoint::Ce,
    }
}

fn udp_ecn(ecn: quinn_proto::EcnCodepoint) -> quinn_udp::EcnCodepoint {
    match ecn {
        quinn_proto::EcnCodepoint::Ect0 => quinn_udp::EcnCodepoint::Ect0,
        quinn_proto::EcnCodepoint::Ect1 => quinn_udp::EcnCodepoint::Ect1,
        quinn_proto::EcnCodepoint::Ce => quinn_udp::EcnCodepoint::Ce,
    }
}
