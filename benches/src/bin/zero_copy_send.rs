//! Ways to send stored bytes to a TCP reader, measured in the same run:
//! what a broker's read path could use, next to the plain `write(2)` copy
//! (the raw-TCP baseline).
//!
//! - `write`: `write(2)` from one hot 1 MiB buffer, the raw-TCP baseline
//!   every other figure is divided by;
//! - `read + write`: the file read into a buffer and written, the copy a
//!   broker without sendfile would make;
//! - `sendfile`: `sendfile(2)` from a page-cached file, what kelp's TCP
//!   fetch of a chunk file or sealed buffer does today (`engine/src/file_range.rs`);
//! - `io_uring send_zc`: `IORING_OP_SEND_ZC` from the file mapped in
//!   memory (as a sealed buffer is), several in flight;
//! - `io_uring splice`: `IORING_OP_SPLICE` file to pipe, then pipe to socket.
//!
//! The io_uring operations go through the `io-uring` crate directly, since
//! glommio exposes neither. CPU is the whole process's (io_uring may hand
//! work to its kernel worker threads, which count there) minus the reader
//! thread's. Loopback is not a NIC: the kernel copies zero-copy sends to a
//! local socket (it reports so through the notification), so these figures
//! say what the operations cost here, not what they save on a real network.
//! The result is recorded in `docs/broker.md` ("Reads").
//!
//! `target/release/zero_copy_send [--bytes N] [--rounds R] [--dir D]`

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use io_uring::{cqueue, opcode, types, IoUring};
use kelp_benches::baseline::cpu_time;

#[derive(Parser, Debug)]
struct Args {
    /// Bytes sent per way and round.
    #[arg(long, default_value_t = 256 << 20)]
    bytes: u64,
    /// Rounds; the ways alternate within each, the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for the file the file-based ways send.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Bytes per `write`, `sendfile` and splice call.
const STEP_BYTES: usize = 1 << 20;
/// Bytes per `sendfile` call (a broker sends a whole fetch answer range
/// in one call where the socket takes it).
const SENDFILE_BYTES: usize = 8 << 20;
/// Bytes per zero-copy send.
const SEND_ZC_BYTES: usize = 256 << 10;
/// Zero-copy sends in flight (each on its own slice of the buffer).
const SEND_ZC_IN_FLIGHT: usize = 8;
/// The pipe between file and socket for splice (Linux's default
/// `pipe-max-size`).
const PIPE_BYTES: libc::c_int = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Write,
    ReadWrite,
    Sendfile,
    SendZc,
    Splice,
}

impl Way {
    const ALL: [Way; 5] = [
        Way::Write,
        Way::ReadWrite,
        Way::Sendfile,
        Way::SendZc,
        Way::Splice,
    ];

    fn name(self) -> &'static str {
        match self {
            Way::Write => "write from memory (raw TCP)",
            Way::ReadWrite => "read + write (file, copy)",
            Way::Sendfile => "sendfile (kelp today)",
            Way::SendZc => "io_uring send_zc (mmap)",
            Way::Splice => "io_uring splice",
        }
    }
}

/// One way's figures in one round.
#[derive(Clone, Copy)]
struct Figures {
    bytes_per_sec: f64,
    sender_cpu_per_gb: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("kelp-zero-copy-send-{}", std::process::id()));
    let result = measure(&args, &path);
    let removed = std::fs::remove_file(&path);
    let figures = result?;
    removed.with_context(|| format!("removing {}", path.display()))?;
    print(&args, &figures);
    Ok(())
}

fn measure(args: &Args, path: &PathBuf) -> Result<Vec<Vec<Figures>>> {
    write_file(path, args.bytes)?;
    let memory = vec![0x5au8; STEP_BYTES];
    let mut figures = vec![Vec::new(); Way::ALL.len()];
    for _ in 0..args.rounds {
        for (i, way) in Way::ALL.into_iter().enumerate() {
            figures[i].push(send_once(way, args.bytes, path, &memory)?);
        }
    }
    Ok(figures)
}

fn print(args: &Args, figures: &[Vec<Figures>]) {
    println!(
        "{} MiB to a loopback TCP reader per way, median of {} alternated rounds",
        args.bytes >> 20,
        args.rounds
    );
    println!(
        "{:<24} {:>10} {:>7} {:>16} {:>10}",
        "way", "MB/s", "ratio", "sender CPU s/GB", "CPU ratio"
    );
    let medians: Vec<Figures> = figures.iter().map(|f| median(f)).collect();
    let base = medians[0];
    for (way, m) in Way::ALL.into_iter().zip(&medians) {
        println!(
            "{:<24} {:>10.0} {:>7.2} {:>16.3} {:>10.2}",
            way.name(),
            m.bytes_per_sec / 1e6,
            m.bytes_per_sec / base.bytes_per_sec,
            m.sender_cpu_per_gb,
            m.sender_cpu_per_gb / base.sender_cpu_per_gb
        );
    }
}

fn median(f: &[Figures]) -> Figures {
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Figures {
        bytes_per_sec: mid(f.iter().map(|x| x.bytes_per_sec).collect()),
        sender_cpu_per_gb: mid(f.iter().map(|x| x.sender_cpu_per_gb).collect()),
    }
}

/// Writes `bytes` to `path` and reads them back, so the file is in the
/// page cache as a broker's recently written chunk would be.
fn write_file(path: &PathBuf, bytes: u64) -> Result<()> {
    let mut file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0xa5u8; STEP_BYTES];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(STEP_BYTES as u64) as usize;
        file.write_all(&block[..n])?;
        left -= n as u64;
    }
    file.sync_data()?;
    let mut sink = vec![0u8; STEP_BYTES];
    let mut file = File::open(path)?;
    while file.read(&mut sink)? > 0 {}
    Ok(())
}

/// Sends `bytes` one way to a fresh reader thread and measures it.
fn send_once(way: Way, bytes: u64, path: &PathBuf, memory: &[u8]) -> Result<Figures> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = thread::spawn(move || -> Result<(u64, Duration)> {
        let (mut socket, _) = listener.accept()?;
        let before = cpu_time(libc::RUSAGE_THREAD);
        let mut buf = vec![0u8; STEP_BYTES];
        let mut total = 0u64;
        loop {
            let n = socket.read(&mut buf)?;
            if n == 0 {
                return Ok((total, cpu_time(libc::RUSAGE_THREAD) - before));
            }
            total += n as u64;
        }
    });
    let mut socket = TcpStream::connect(addr)?;
    socket.set_nodelay(true)?;
    let file = File::open(path)?;
    let cpu_before = cpu_time(libc::RUSAGE_SELF);
    let start = Instant::now();
    match way {
        Way::Write => send_write(&mut socket, bytes, memory)?,
        Way::ReadWrite => send_read_write(&mut socket, &file, bytes)?,
        Way::Sendfile => send_sendfile(&socket, &file, bytes)?,
        Way::SendZc => {
            // SAFETY: the file is this program's own and nobody changes it
            // while it is mapped.
            let map = unsafe { memmap2::Mmap::map(&file)? };
            send_zc(&socket, &map[..bytes as usize])?
        }
        Way::Splice => send_splice(&socket, &file, bytes)?,
    }
    socket.shutdown(std::net::Shutdown::Write)?;
    let (received, reader_cpu) = reader.join().expect("reader thread panicked")?;
    let elapsed = start.elapsed();
    let sender_cpu = (cpu_time(libc::RUSAGE_SELF) - cpu_before).saturating_sub(reader_cpu);
    if received != bytes {
        bail!(
            "{}: sent {bytes} bytes, the reader got {received}",
            way.name()
        );
    }
    Ok(Figures {
        bytes_per_sec: bytes as f64 / elapsed.as_secs_f64(),
        sender_cpu_per_gb: sender_cpu.as_secs_f64() / (bytes as f64 / 1e9),
    })
}

fn send_write(socket: &mut TcpStream, bytes: u64, memory: &[u8]) -> Result<()> {
    let mut left = bytes;
    while left > 0 {
        let n = left.min(memory.len() as u64) as usize;
        socket.write_all(&memory[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn send_read_write(socket: &mut TcpStream, mut file: &File, bytes: u64) -> Result<()> {
    let mut buf = vec![0u8; STEP_BYTES];
    let mut left = bytes;
    while left > 0 {
        let n = file.read(&mut buf[..left.min(STEP_BYTES as u64) as usize])?;
        if n == 0 {
            bail!("read: the file ended {left} bytes early");
        }
        socket.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn send_sendfile(socket: &TcpStream, file: &File, bytes: u64) -> Result<()> {
    let mut offset: libc::off_t = 0;
    while (offset as u64) < bytes {
        let n = (bytes - offset as u64).min(SENDFILE_BYTES as u64) as usize;
        // SAFETY: both descriptors are open for the call; `offset` is a
        // valid, writable off_t.
        let sent = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, n) };
        if sent < 0 {
            return Err(std::io::Error::last_os_error()).context("sendfile");
        }
        if sent == 0 {
            bail!("sendfile: the file ended at {offset}");
        }
    }
    Ok(())
}

/// Zero-copy sends from `source` (the file, mapped), `SEND_ZC_IN_FLIGHT`
/// at a time. A slot is free again only after its notification
/// completion, which says the kernel no longer reads its range; a short
/// send's rest is asked for again.
fn send_zc(socket: &TcpStream, source: &[u8]) -> Result<()> {
    let mut ring = IoUring::new(2 * SEND_ZC_IN_FLIGHT as u32)?;
    let fd = types::Fd(socket.as_raw_fd());
    // Per slot: the range its send asked for, while in flight.
    let mut slots: [Option<(usize, u32)>; SEND_ZC_IN_FLIGHT] = [None; SEND_ZC_IN_FLIGHT];
    let mut redo: Vec<(usize, u32)> = Vec::with_capacity(SEND_ZC_IN_FLIGHT);
    let mut next = 0usize; // the first byte not yet asked for
    let mut sent = 0usize;
    while sent < source.len() {
        for (slot, range) in slots.iter_mut().enumerate() {
            if range.is_some() {
                continue;
            }
            let ask = match redo.pop() {
                Some(r) => r,
                None if next < source.len() => {
                    let n = (source.len() - next).min(SEND_ZC_BYTES);
                    next += n;
                    (next - n, n as u32)
                }
                None => break,
            };
            let sqe = opcode::SendZc::new(fd, source[ask.0..].as_ptr(), ask.1)
                .build()
                .user_data(slot as u64);
            // SAFETY: the mapping outlives the ring, which is drained
            // before this function returns.
            unsafe { ring.submission().push(&sqe) }.context("submission queue full")?;
            *range = Some(ask);
        }
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            let slot = cqe.user_data() as usize;
            if cqueue::notif(cqe.flags()) {
                slots[slot] = None;
                continue;
            }
            if cqe.result() < 0 {
                bail!(
                    "send_zc: {}",
                    std::io::Error::from_raw_os_error(-cqe.result())
                );
            }
            let (at, asked) = slots[slot].context("a completion for an idle slot")?;
            let done = cqe.result() as u32;
            sent += done as usize;
            if done < asked {
                redo.push((at + done as usize, asked - done));
            }
            if !cqueue::more(cqe.flags()) {
                slots[slot] = None;
            }
        }
    }
    // The notifications still owed, before the mapping may go.
    while slots.iter().any(Option::is_some) {
        ring.submit_and_wait(1)?;
        for cqe in ring.completion() {
            if cqueue::notif(cqe.flags()) || !cqueue::more(cqe.flags()) {
                slots[cqe.user_data() as usize] = None;
            }
        }
    }
    Ok(())
}

/// File to pipe, then pipe to socket, each an io_uring splice.
fn send_splice(socket: &TcpStream, file: &File, bytes: u64) -> Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    // SAFETY: pipe2 returned two descriptors we now own.
    let (pipe_r, pipe_w) = unsafe {
        use std::os::fd::FromRawFd;
        (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1]))
    };
    // SAFETY: plain fcntl on a pipe we own; failure leaves the default size.
    unsafe { libc::fcntl(pipe_w.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    let mut ring = IoUring::new(4)?;
    let mut offset = 0u64;
    while offset < bytes {
        let n = (bytes - offset).min(STEP_BYTES as u64) as u32;
        let into_pipe = opcode::Splice::new(
            types::Fd(file.as_raw_fd()),
            offset as i64,
            types::Fd(pipe_w.as_raw_fd()),
            -1,
            n,
        )
        .build();
        let mut in_pipe = complete(&mut ring, &into_pipe, "splice file to pipe")?;
        if in_pipe == 0 {
            bail!("splice: the file ended at {offset}");
        }
        offset += in_pipe as u64;
        while in_pipe > 0 {
            let out = opcode::Splice::new(
                types::Fd(pipe_r.as_raw_fd()),
                -1,
                types::Fd(socket.as_raw_fd()),
                -1,
                in_pipe,
            )
            .build();
            in_pipe -= complete(&mut ring, &out, "splice pipe to socket")?;
        }
    }
    Ok(())
}

/// Submits one operation and waits for its completion.
fn complete(ring: &mut IoUring, sqe: &io_uring::squeue::Entry, what: &str) -> Result<u32> {
    // SAFETY: the operation names only descriptors that stay open until
    // its completion, which this function waits for.
    unsafe { ring.submission().push(sqe) }.context("submission queue full")?;
    ring.submit_and_wait(1)?;
    let cqe = ring.completion().next().context("no completion")?;
    if cqe.result() < 0 {
        bail!(
            "{what}: {}",
            std::io::Error::from_raw_os_error(-cqe.result())
        );
    }
    Ok(cqe.result() as u32)
}
