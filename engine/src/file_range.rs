//! A fetch answer's batches left in the file they are in (a segment buffer
//! or a chunk of the local filer), and how they are sent from there.
//!
//! A TCP connection sends them with `sendfile(2)`: the kernel hands the
//! page-cache pages to the socket, and neither a user-space copy nor a
//! checksum pass touches the bytes on the broker. The frame's checksum is
//! stated from each batch's stored checksum (`wire::BatchHead`), so the
//! reader, which checks the frame, checks every batch with it, as Kafka's
//! readers check batch CRCs. Transports that need the bytes in memory
//! (QUIC, the Kafka gateway's inbox) copy them once (`FileRange::bytes`).
//!
//! `sendfile` on the shard's thread must never wait for the disk, so a
//! range not wholly in the page cache is first read in on the blocking
//! pool (`FileRange::is_resident`, `FileRange::load`).

use std::os::unix::io::RawFd;
use std::sync::Arc;

use crate::buffer::MappedFile;

/// Bytes of a page, for `mincore`.
const PAGE_BYTES: usize = 4096;

/// Whole batches `[from, to)` of a mapped file, and their CRC-32C.
#[derive(Debug, Clone)]
pub(crate) struct FileRange {
    file: Arc<MappedFile>,
    from: usize,
    to: usize,
    crc: u32,
}

impl FileRange {
    /// `crc` must be the CRC-32C the bytes `[from, to)` have if every
    /// batch's stored checksum is right.
    pub(crate) fn new(file: Arc<MappedFile>, from: usize, to: usize, crc: u32) -> FileRange {
        assert!(from <= to && to <= file.bytes().len());
        FileRange {
            file,
            from,
            to,
            crc,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.to - self.from
    }

    /// The bytes, through the mapping (faulting pages in as they are read).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.file.bytes()[self.from..self.to]
    }

    /// Whether every page of the range is in the page cache, so that
    /// sending it costs no disk read on the caller's thread.
    pub(crate) fn is_resident(&self) -> bool {
        if self.from == self.to {
            return true;
        }
        let map = self.file.bytes();
        let first = self.from / PAGE_BYTES * PAGE_BYTES;
        let pages = (self.to - first).div_ceil(PAGE_BYTES);
        let mut present = vec![0u8; pages];
        // SAFETY: `first` is page-aligned and inside the mapping, the length
        // stays inside it (rounded up to a page, which mincore allows), and
        // `present` has one byte per page.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr().add(first) as *mut libc::c_void,
                self.to - first,
                present.as_mut_ptr(),
            )
        };
        rc == 0 && present.iter().all(|p| p & 1 == 1)
    }

    /// Read the range into the page cache. Blocks on the disk: call it on
    /// the blocking pool.
    pub(crate) fn load(&self) {
        let bytes = self.bytes();
        let mut sum = 0u8;
        for at in (0..bytes.len()).step_by(PAGE_BYTES) {
            sum = sum.wrapping_add(bytes[at]);
        }
        std::hint::black_box(sum);
    }

    /// Send as much of `[*at, to)` as the socket takes now, with
    /// `sendfile`, advancing `*at` (an offset in the file). `Ok(false)`
    /// means the socket is full: wait until it can be written, then call
    /// again. The socket must be non-blocking.
    pub(crate) fn send_some(&self, socket: RawFd, at: &mut usize) -> std::io::Result<bool> {
        while *at < self.to {
            let mut offset = *at as libc::off_t;
            // SAFETY: both descriptors are open (the file's is held by
            // `self.file`); `offset` is a valid pointer for the call.
            let sent =
                unsafe { libc::sendfile(socket, self.file.fd(), &mut offset, self.to - *at) };
            if sent > 0 {
                *at = offset as usize;
                continue;
            }
            if sent == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file ended before the batches it was read for",
                ));
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => return Ok(false),
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        Ok(true)
    }

    /// Where the range starts and ends in its file.
    pub(crate) fn span(&self) -> (usize, usize) {
        (self.from, self.to)
    }

    /// The file's bytes from `at` on, within the range, at most `max`.
    pub(crate) fn piece(&self, at: usize, max: usize) -> &[u8] {
        &self.file.bytes()[at..self.to.min(at.saturating_add(max))]
    }
}

/// The most files one fetch answer is sent from: a fetch that reaches the
/// end of a buffer or chunk goes on into the next one, so answers stay
/// near the reader's `max_bytes` whatever the chunk size, but a run of
/// tiny chunks (sealed by age under a trickle) cannot make one answer
/// open hundreds of files.
pub(crate) const FETCH_FILES_MAX: usize = 8;

/// A fetch answer's batches in one or more files, in offset order, and
/// the CRC-32C of all their bytes end to end.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileRanges {
    ranges: Vec<FileRange>,
    len: usize,
    crc: u32,
}

impl FileRanges {
    pub(crate) fn new(first: FileRange) -> FileRanges {
        let mut ranges = FileRanges::default();
        ranges.push(first);
        ranges
    }

    /// Append the batches that follow the last range's.
    pub(crate) fn push(&mut self, range: FileRange) {
        assert!(self.ranges.len() < FETCH_FILES_MAX);
        self.crc = wire::checksum::crc32c_combine(self.crc, range.crc, range.len());
        self.len += range.len();
        self.ranges.push(range);
    }

    pub(crate) fn is_full(&self) -> bool {
        self.ranges.len() >= FETCH_FILES_MAX
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn crc(&self) -> u32 {
        self.crc
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &FileRange> {
        self.ranges.iter()
    }

    /// Whether every range is in the page cache.
    pub(crate) fn is_resident(&self) -> bool {
        self.ranges.iter().all(FileRange::is_resident)
    }

    /// Read every range into the page cache (on the blocking pool).
    pub(crate) fn load(&self) {
        self.ranges.iter().for_each(FileRange::load);
    }

    /// The bytes of every range, end to end, appended to `out`.
    pub(crate) fn copy_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len);
        for range in &self.ranges {
            out.extend_from_slice(range.bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mapped(bytes: &[u8]) -> Arc<MappedFile> {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), bytes).unwrap();
        Arc::new(MappedFile::open(file.path()).unwrap())
    }

    #[test]
    fn ranges_of_several_files_state_the_checksum_of_their_bytes_end_to_end() {
        let a = mapped(&(0..10_000u32).map(|i| i as u8).collect::<Vec<_>>());
        let b = mapped(&(0..5_000u32).map(|i| (i * 7) as u8).collect::<Vec<_>>());
        let crc = |bytes: &[u8]| wire::checksum::crc32c(bytes);
        let first = FileRange::new(a.clone(), 100, 9_000, crc(&a.bytes()[100..9_000]));
        let second = FileRange::new(b.clone(), 0, 4_321, crc(&b.bytes()[..4_321]));
        let mut ranges = FileRanges::new(first);
        assert_eq!(ranges.crc(), crc(&a.bytes()[100..9_000]));
        ranges.push(second);
        let mut all = Vec::new();
        ranges.copy_to(&mut all);
        assert_eq!(all.len(), ranges.len());
        assert_eq!(all.len(), 8_900 + 4_321);
        assert_eq!(ranges.crc(), crc(&all));
        assert!(ranges.is_resident());
    }

    #[test]
    fn ranges_hold_at_most_their_limit_of_files() {
        let a = mapped(&[1u8; 64]);
        let mut ranges = FileRanges::new(FileRange::new(a.clone(), 0, 8, 0));
        while !ranges.is_full() {
            ranges.push(FileRange::new(a.clone(), 0, 8, 0));
        }
        assert_eq!(ranges.iter().count(), FETCH_FILES_MAX);
    }
}
