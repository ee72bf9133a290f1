//! Memory-mapped segment buffers: where ingested batches land, and where a
//! chunk file is built in place before it is written to the filer.
//!
//! A buffer is a file under `<data-dir>/buffers/` laid out exactly like a
//! chunk (`docs/chunk-format.md`): a 64-byte header region, then batches
//! end to end, then room for the index. The file is mapped (shared,
//! read-only) and every read is served from that mapping. Appending copies a
//! batch once, from the receive buffer into the file's page cache, with a
//! positional write (`pwritev`) rather than through a writable mapping:
//! measured on this host, writing through the mapping costs ~1 CPU s/GB in
//! page zeroing, faults and TLB shootdowns, the positional write 0.15
//! (BENCHMARKS.md), and both land in the same page-cache pages the mapping
//! shows. Sealing writes the index and the header in place, and the sealed
//! file is handed to the filer as the chunk. The file survives a crash of
//! the broker: on restart it is re-read, every batch checked by its
//! checksum, and flushed.
//!
//! This module never does network I/O and never blocks on the filer.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use memmap2::Mmap;
use std::os::unix::fs::FileExt;
use wire::batch::{BatchView, BATCH_HEADER_BYTES};
use wire::chunk::{
    chunk_bytes_max, encode_index, index_bytes, ChunkHeader, ChunkIndexBuilder, ChunkIndexEntry,
    CHUNK_HEADER_BYTES, CHUNK_MAGIC,
};

use crate::error::EngineError;
use crate::salvage::Scan;

/// Where the header's segment id and base offset live before sealing; the
/// sealed header (with its checksum) overwrites them with the same values.
const SEGMENT_ID_OFFSET: usize = 12;
const BASE_OFFSET_OFFSET: usize = 16;

/// A buffer or chunk file held open and mapped read-only: what reads are
/// served from, by copy or straight from the file (`sendfile`). Shared
/// (`Arc`) by the segment and the connections sending from it, so a flush
/// (which renames the file) or a topic's deletion (which unlinks it) never
/// pulls bytes from under a send: the descriptor and mapping stay valid.
#[derive(Debug)]
pub(crate) struct MappedFile {
    file: File,
    map: Mmap,
}

impl MappedFile {
    /// Open and map a file this broker wrote (a chunk in the local filer).
    pub(crate) fn open(path: &Path) -> Result<MappedFile, EngineError> {
        let file = File::open(path).map_err(|e| EngineError::io("open chunk", path, e))?;
        let map = map_file(&file, path)?;
        Ok(MappedFile { file, map })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub(crate) fn fd(&self) -> std::os::unix::io::RawFd {
        self.file.as_raw_fd()
    }
}

/// The buffer being appended to. Public (not re-exported) only so the
/// `bench` feature can hand it to the criterion benchmarks.
#[derive(Debug)]
pub struct ActiveBuffer {
    path: PathBuf,
    mapped: Arc<MappedFile>,
    segment_id: u32,
    base_offset: u64,
    next_offset: u64,
    data_bytes: usize,
    data_capacity: usize,
    index: ChunkIndexBuilder,
    opened_at: Instant,
    /// File bytes before this are being written back (or were).
    writeback_from: u64,
}

impl ActiveBuffer {
    /// Create the file, reserve its blocks (so a full disk fails here, not
    /// as a SIGBUS on a later write to the mapping), and map it.
    ///
    /// It is made under a spare's name and renamed to `path` only once its
    /// header is written, so a crash or a full disk at any point leaves
    /// either a valid buffer or a spare that recovery removes, never a
    /// file under a buffer's name that recovery cannot read.
    pub fn create(
        path: PathBuf,
        segment_id: u32,
        base_offset: u64,
        data_capacity: usize,
    ) -> Result<ActiveBuffer, EngineError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let staging = path.with_file_name(format!("{SPARE_PREFIX}for-{name}"));
        SpareBuffer::create(staging, data_capacity)?.activate(path, segment_id, base_offset)
    }

    /// Re-open a buffer left by an earlier run, as far as `good` (from its
    /// [`check`], which verified every batch once) says its batches check
    /// out from the start: what follows was never acknowledged, or is
    /// damage the caller salvaged. The batches are walked by their lengths
    /// only, to index them; their checksums are not computed again.
    pub(crate) fn recover(
        path: PathBuf,
        segment_id: u32,
        good: GoodPrefix,
    ) -> Result<ActiveBuffer, EngineError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| EngineError::io("open buffer", &path, e))?;
        let map = map_file(&file, &path)?;
        let mapped = Arc::new(MappedFile { file, map });
        let (file, map) = (&mapped.file, &mapped.map);
        let corrupt = |reason: &str| EngineError::Corrupt {
            what: format!("buffer {}", path.display()),
            reason: reason.to_owned(),
        };
        if map.len() < CHUNK_HEADER_BYTES || map[..8] != CHUNK_MAGIC {
            return Err(corrupt("no chunk magic"));
        }
        let stored_segment = u32::from_le_bytes(
            map[SEGMENT_ID_OFFSET..SEGMENT_ID_OFFSET + 4]
                .try_into()
                .map_err(|_| corrupt("short header"))?,
        );
        if stored_segment != segment_id {
            return Err(corrupt("belongs to another segment"));
        }
        let base_offset = u64::from_le_bytes(
            map[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8]
                .try_into()
                .map_err(|_| corrupt("short header"))?,
        );
        let data_capacity = data_capacity_for(map.len() as u64) as usize;
        // Not bounded by `data_capacity`: a sealed buffer's file is cut to
        // its chunk's length, and the capacity that length implies can be
        // smaller than the data its header states (the check bounded the
        // prefix by the file already).
        let scan_end = (CHUNK_HEADER_BYTES + good.data_bytes).min(map.len());
        let mut index = ChunkIndexBuilder::new(data_capacity as u64);
        let mut next_offset = base_offset;
        let mut position = CHUNK_HEADER_BYTES;
        while position < scan_end {
            let rest = &map[position..scan_end];
            let Some(len) = BatchView::peek_len(rest) else {
                break;
            };
            let len = len as usize;
            if len < BATCH_HEADER_BYTES || len > rest.len() {
                break;
            }
            // Verified by the check this prefix comes from.
            let batch = BatchView::trusted(&rest[..len]);
            if batch.base_offset() != next_offset {
                break;
            }
            index.observe((position - CHUNK_HEADER_BYTES) as u64, &batch);
            next_offset = batch.next_offset();
            position += len;
        }
        if (position - CHUNK_HEADER_BYTES, next_offset) != (good.data_bytes, good.next_offset)
            && good.data_bytes > 0
        {
            return Err(corrupt(&format!(
                "changed since it was checked: its good batches end at data byte {} and \
                 offset {next_offset}, the check found {} and {}",
                position - CHUNK_HEADER_BYTES,
                good.data_bytes,
                good.next_offset
            )));
        }
        // Zero the header checksum: the buffer is open again until sealed.
        file.write_all_at(&[0; 4], 60)
            .map_err(|e| EngineError::io("write buffer header", &path, e))?;
        Ok(ActiveBuffer {
            path,
            mapped,
            segment_id,
            base_offset,
            next_offset,
            data_bytes: position - CHUNK_HEADER_BYTES,
            data_capacity,
            index,
            opened_at: Instant::now(),
            writeback_from: 0,
        })
    }

    pub(crate) fn base_offset(&self) -> u64 {
        self.base_offset
    }
    pub(crate) fn next_offset(&self) -> u64 {
        self.next_offset
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.data_bytes == 0
    }
    /// Batch bytes appended so far.
    pub(crate) fn data_bytes(&self) -> u64 {
        self.data_bytes as u64
    }
    /// Batch bytes it can hold.
    pub(crate) fn data_capacity(&self) -> u64 {
        self.data_capacity as u64
    }
    pub(crate) fn opened_at(&self) -> Instant {
        self.opened_at
    }
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes its chunk file will have once sealed.
    pub(crate) fn file_bytes(&self) -> u64 {
        (CHUNK_HEADER_BYTES + self.data_bytes) as u64
            + index_bytes(self.index.entries().len() as u64)
    }

    /// The file range appended since the last call that returned one, once
    /// it reaches `step` bytes: where to start the kernel's write-back, so
    /// a large buffer's dirty pages go to disk as it fills, not in one
    /// burst once it is sealed.
    pub(crate) fn writeback_due(&mut self, step: u64) -> Option<(u64, u64)> {
        let end = (CHUNK_HEADER_BYTES + self.data_bytes) as u64;
        let len = end.saturating_sub(self.writeback_from);
        if len < step {
            return None;
        }
        let from = std::mem::replace(&mut self.writeback_from, end);
        Some((from, len))
    }

    /// Whether a batch of `len` bytes fits.
    pub fn fits(&self, len: usize) -> bool {
        self.data_bytes + len <= self.data_capacity
    }

    /// Copy a validated batch in, its base offset stamped on the way. The
    /// caller checked `fits`. Returns the offsets `[base, next)` it was
    /// given.
    pub fn append(&mut self, batch: &BatchView<'_>) -> Result<(u64, u64), EngineError> {
        let bytes = batch.bytes();
        debug_assert!(self.fits(bytes.len()));
        let at = (CHUNK_HEADER_BYTES + self.data_bytes) as u64;
        let base = self.next_offset;
        // The base offset leads the batch and sits outside its checksum:
        // write it in place of the producer's zero, then the rest, in one
        // system call.
        write_all_at(
            &self.mapped.file,
            [&base.to_le_bytes(), &bytes[BASE_OFFSET_END..]],
            at,
        )
        .map_err(|e| EngineError::io("append to buffer", &self.path, e))?;
        self.index.observe_at(self.data_bytes as u64, base, batch);
        self.data_bytes += bytes.len();
        self.next_offset = base + u64::from(batch.record_count());
        Ok((base, self.next_offset))
    }

    /// Make the appended batches durable (`fdatasync`).
    pub(crate) fn sync(&self) -> Result<(), EngineError> {
        self.mapped
            .file
            .sync_data()
            .map_err(|e| EngineError::io("sync buffer", &self.path, e))
    }

    /// The batches appended so far.
    pub(crate) fn data(&self) -> &[u8] {
        &self.mapped.map[CHUNK_HEADER_BYTES..CHUNK_HEADER_BYTES + self.data_bytes]
    }

    /// The file the batches are in (`data` starts at `CHUNK_HEADER_BYTES`).
    pub(crate) fn mapped(&self) -> &Arc<MappedFile> {
        &self.mapped
    }

    pub(crate) fn index(&self) -> &[ChunkIndexEntry] {
        self.index.entries()
    }

    /// The largest record timestamp appended (`i64::MIN` while empty), as
    /// its chunk header will say once sealed.
    pub(crate) fn max_timestamp_ms(&self) -> i64 {
        self.index.max_timestamp_ms()
    }

    /// Write the index and header in place: the mapping now holds a whole
    /// chunk file.
    pub(crate) fn seal(self) -> Result<SealedBuffer, EngineError> {
        let entries = self.index.entries().len();
        let index_at = CHUNK_HEADER_BYTES + self.data_bytes;
        let mut index = vec![0u8; index_bytes(entries as u64) as usize];
        encode_index(self.index.entries(), &mut index);
        let header = ChunkHeader {
            segment_id: self.segment_id,
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            data_bytes: self.data_bytes as u64,
            min_timestamp_ms: self.index.min_timestamp_ms(),
            max_timestamp_ms: self.index.max_timestamp_ms(),
            index_entries: entries as u32,
            has_references: self.index.has_references(),
        };
        let io = |e| EngineError::io("seal buffer", &self.path, e);
        self.mapped
            .file
            .write_all_at(&index, index_at as u64)
            .map_err(io)?;
        self.mapped
            .file
            .write_all_at(&header.encode(), 0)
            .map_err(io)?;
        Ok(SealedBuffer {
            index: self.index.entries().to_vec(),
            path: self.path,
            mapped: self.mapped,
            header,
        })
    }
}

/// The stretch of a buffer file, from its first batch, whose batches all
/// verified and follow each other's offsets from the buffer's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GoodPrefix {
    /// Its bytes after the header.
    pub(crate) data_bytes: usize,
    /// The offset after its last batch (the base offset if it is empty).
    pub(crate) next_offset: u64,
}

/// What a buffer file left by an earlier run holds, read without changing
/// it: whether its header is the one expected, and its batches sorted into
/// good runs and damage (`salvage::scan`).
#[derive(Debug)]
pub(crate) struct BufferCheck {
    /// Magic, segment id and base offset are the expected ones.
    pub(crate) header_ok: bool,
    /// The base offset its name gives.
    base_offset: u64,
    pub(crate) scan: Scan,
    /// The file, and where the data the scan covered ends in it.
    map: Mmap,
    data_end: usize,
}

impl BufferCheck {
    /// The file's header region (shorter if the file is).
    pub(crate) fn header(&self) -> &[u8] {
        &self.map[..self.map.len().min(CHUNK_HEADER_BYTES)]
    }

    /// The bytes the scan's positions are in: the file's from
    /// `CHUNK_HEADER_BYTES`.
    pub(crate) fn data(&self) -> &[u8] {
        self.map
            .get(CHUNK_HEADER_BYTES..self.data_end)
            .unwrap_or(&[])
    }

    /// Whether recovery can take the file as it is.
    pub(crate) fn is_clean(&self) -> bool {
        self.header_ok && self.scan.is_clean()
    }

    /// The good batches from the data's start: what
    /// [`ActiveBuffer::recover`] takes of the file.
    pub(crate) fn good_prefix(&self) -> GoodPrefix {
        self.scan
            .runs
            .first()
            .filter(|run| run.from == 0 && run.base_offset == self.base_offset)
            .map_or(
                GoodPrefix {
                    data_bytes: 0,
                    next_offset: self.base_offset,
                },
                |run| GoodPrefix {
                    data_bytes: run.to,
                    next_offset: run.next_offset,
                },
            )
    }
}

/// Read the buffer file at `path`, which its name says holds `segment_id`
/// from `base_offset`. `next_base` is the base offset of the next buffer
/// file of the segment, if any: where this one must have ended.
pub(crate) fn check(
    path: &Path,
    segment_id: u32,
    base_offset: u64,
    next_base: Option<u64>,
) -> Result<BufferCheck, EngineError> {
    let file = File::open(path).map_err(|e| EngineError::io("open buffer", path, e))?;
    let map = map_file(&file, path)?;
    let field = |at: usize, n: usize| map.get(at..at + n);
    let header_ok = field(0, 8) == Some(&CHUNK_MAGIC[..])
        && field(SEGMENT_ID_OFFSET, 4) == Some(&segment_id.to_le_bytes()[..])
        && field(BASE_OFFSET_OFFSET, 8) == Some(&base_offset.to_le_bytes()[..]);
    // A sealed header (its checksum good) states where the data ends and
    // the offset after it.
    let sealed = map
        .get(..CHUNK_HEADER_BYTES)
        .and_then(|h| ChunkHeader::decode(h).ok())
        .filter(|h| header_ok && h.base_offset == base_offset);
    let capacity = data_capacity_for(map.len() as u64) as usize;
    let data_end = sealed
        .map_or(CHUNK_HEADER_BYTES + capacity, |h| {
            CHUNK_HEADER_BYTES + h.data_bytes as usize
        })
        .min(map.len());
    let data = map.get(CHUNK_HEADER_BYTES..data_end).unwrap_or(&[]);
    let end = sealed.map(|h| h.next_offset).or(next_base);
    let scan = crate::salvage::scan(data, base_offset, end);
    Ok(BufferCheck {
        header_ok,
        base_offset,
        scan,
        map,
        data_end,
    })
}

/// Write the unsealed header of `segment_id` from `base_offset` over a
/// damaged one, so the file recovers (its first good run) as a buffer.
pub(crate) fn rewrite_header(
    path: &Path,
    segment_id: u32,
    base_offset: u64,
) -> Result<(), EngineError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| EngineError::io("open buffer", path, e))?;
    let mut head = [0u8; CHUNK_HEADER_BYTES];
    head[..8].copy_from_slice(&CHUNK_MAGIC);
    head[SEGMENT_ID_OFFSET..SEGMENT_ID_OFFSET + 4].copy_from_slice(&segment_id.to_le_bytes());
    head[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_le_bytes());
    file.write_all_at(&head, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| EngineError::io("rewrite buffer header", path, e))
}

impl MappedFile {
    /// Ask the kernel to start writing `len` bytes at `from` to disk,
    /// without waiting (`SYNC_FILE_RANGE_WRITE`). Only a hint that spreads
    /// the disk's and the write-back's work: durability comes from the
    /// filer's own sync, so a failure here is ignored.
    pub(crate) fn start_writeback(&self, from: u64, len: u64) {
        let (Ok(from), Ok(len)) = (i64::try_from(from), i64::try_from(len)) else {
            return;
        };
        // SAFETY: a plain syscall on a descriptor this file keeps open.
        unsafe {
            libc::sync_file_range(self.fd(), from, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
}

/// A buffer file made ahead of time on the blocking pool (created, its
/// blocks reserved, mapped), so the shard that takes it as its next active
/// buffer makes no file-system call but a rename and one small write.
#[derive(Debug)]
pub(crate) struct SpareBuffer {
    path: PathBuf,
    mapped: Arc<MappedFile>,
    data_capacity: usize,
}

impl SpareBuffer {
    /// Make a spare at `path` (a name recovery ignores).
    pub(crate) fn create(path: PathBuf, data_capacity: usize) -> Result<SpareBuffer, EngineError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| EngineError::io("create dir", dir, e))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| EngineError::io("create buffer", &path, e))?;
        let map_bytes = chunk_bytes_max(data_capacity as u64);
        let reserved = reserve(&file, map_bytes)
            .map_err(|e| EngineError::io("fallocate buffer", &path, e))
            .and_then(|()| map_file(&file, &path));
        let map = match reserved {
            Ok(map) => map,
            Err(e) => {
                // A full disk must not leave a file per failed attempt.
                drop(file);
                if let Err(remove) = std::fs::remove_file(&path) {
                    log::warn!("remove failed spare {}: {remove}", path.display());
                }
                return Err(e);
            }
        };
        Ok(SpareBuffer {
            path,
            mapped: Arc::new(MappedFile { file, map }),
            data_capacity,
        })
    }

    pub(crate) fn data_capacity(&self) -> usize {
        self.data_capacity
    }

    /// Bring the file's pages into the page cache before the shard writes
    /// to it: reading the reserved (unwritten) extents fills zeroed pages
    /// with no disk I/O. The page allocation, any reclaim it takes, and on
    /// a VM the host's fault of memory the guest has not touched lately
    /// (several times a page copy on this project's Firecracker host; see
    /// BENCHMARKS.md) are then paid by the caller, a blocking-pool thread,
    /// not by the shard's appends. Only a hint: a failure costs speed,
    /// never bytes.
    pub(crate) fn populate(&self) {
        let bytes = self.mapped.map.len();
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::readahead(self.mapped.file.as_raw_fd(), 0, bytes) };
        if rc != 0 {
            log::debug!(
                "readahead of spare buffer {}: {}",
                self.path.display(),
                std::io::Error::last_os_error()
            );
        }
    }

    /// Become the active buffer of `segment_id` from `base_offset`, under
    /// its final name.
    pub(crate) fn activate(
        self,
        path: PathBuf,
        segment_id: u32,
        base_offset: u64,
    ) -> Result<ActiveBuffer, EngineError> {
        // Magic, segment id and base offset: what recovery needs of an
        // unsealed buffer (the sealed header rewrites them with the rest).
        let mut head = [0u8; BASE_OFFSET_OFFSET + 8];
        head[..8].copy_from_slice(&CHUNK_MAGIC);
        head[SEGMENT_ID_OFFSET..SEGMENT_ID_OFFSET + 4].copy_from_slice(&segment_id.to_le_bytes());
        head[BASE_OFFSET_OFFSET..].copy_from_slice(&base_offset.to_le_bytes());
        self.mapped
            .file
            .write_all_at(&head, 0)
            .map_err(|e| EngineError::io("write buffer header", &self.path, e))?;
        if self.path != path {
            std::fs::rename(&self.path, &path)
                .map_err(|e| EngineError::io("rename spare buffer", &self.path, e))?;
        }
        Ok(ActiveBuffer {
            path,
            mapped: self.mapped,
            segment_id,
            base_offset,
            next_offset: base_offset,
            data_bytes: 0,
            data_capacity: self.data_capacity,
            index: ChunkIndexBuilder::new(self.data_capacity as u64),
            opened_at: Instant::now(),
            writeback_from: 0,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// A sealed buffer: a whole chunk file in a read-only mapping, waiting to
/// be written to the filer (and still served to readers until it is).
#[derive(Debug)]
pub(crate) struct SealedBuffer {
    path: PathBuf,
    mapped: Arc<MappedFile>,
    header: ChunkHeader,
    index: Vec<ChunkIndexEntry>,
}

impl SealedBuffer {
    pub(crate) fn header(&self) -> &ChunkHeader {
        &self.header
    }
    pub(crate) fn index(&self) -> &[ChunkIndexEntry] {
        &self.index
    }
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
    /// The chunk file's bytes.
    pub(crate) fn chunk_bytes(&self) -> &[u8] {
        &self.mapped.map[..self.header.file_bytes() as usize]
    }
    pub(crate) fn data(&self) -> &[u8] {
        &self.mapped.map[CHUNK_HEADER_BYTES..CHUNK_HEADER_BYTES + self.header.data_bytes as usize]
    }
    /// The file the batches are in (`data` starts at `CHUNK_HEADER_BYTES`).
    pub(crate) fn mapped(&self) -> &Arc<MappedFile> {
        &self.mapped
    }
}

/// The data capacity a buffer of `map_bytes` was created with: the largest
/// `c` with `chunk_bytes_max(c) <= map_bytes` (the function is strictly
/// increasing, so this inverts `create`).
fn data_capacity_for(map_bytes: u64) -> u64 {
    let (mut lo, mut hi) = (0u64, map_bytes);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if chunk_bytes_max(mid) <= map_bytes {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

fn map_file(file: &File, path: &Path) -> Result<Mmap, EngineError> {
    // SAFETY: the file is private to this broker (under its data dir) and
    // only this process maps it; nothing truncates it below what is read
    // through the mapping while it is mapped.
    unsafe { Mmap::map(file) }.map_err(|e| EngineError::io("mmap buffer", path, e))
}

/// Where the base offset ends in a batch (it is its first field).
const BASE_OFFSET_END: usize = 8;

/// Write `parts` back to back at `at`, in one `pwritev` when the kernel
/// takes it all (it does for regular files short of a full disk).
fn write_all_at(file: &File, parts: [&[u8]; 2], at: u64) -> std::io::Result<()> {
    let total = parts[0].len() + parts[1].len();
    let iov = parts.map(|p| libc::iovec {
        iov_base: p.as_ptr() as *mut libc::c_void,
        iov_len: p.len(),
    });
    // SAFETY: the iovecs point into live slices for the duration of the
    // call; the descriptor is open.
    let written = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), 2, at as libc::off_t) };
    if written < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let written = written as usize;
    if written == total {
        return Ok(());
    }
    // A short write: finish the rest plainly.
    let mut joined = Vec::with_capacity(total - written);
    for p in parts {
        joined.extend_from_slice(p);
    }
    file.write_all_at(&joined[written..], at + written as u64)
}

/// Buffer files named `spare-...buf` hold no records: spares made ahead,
/// and new buffers before their header is written.
pub(crate) const SPARE_PREFIX: &str = "spare-";

/// Whether a buffer file never held a record: too short for a header, or
/// neither a chunk magic nor a first batch (both are written in place, the
/// header before any batch, so a crash while creating the file leaves
/// zeros). Such a file is left by a crash between its creation and its
/// header write in a broker before this check existed, or by a full disk.
pub(crate) fn never_held_a_record(path: &Path) -> Result<bool, EngineError> {
    let file = File::open(path).map_err(|e| EngineError::io("open buffer", path, e))?;
    let mut head = [0u8; CHUNK_HEADER_BYTES + wire::batch::BATCH_HEADER_BYTES];
    let mut read = 0;
    while read < head.len() {
        match file.read_at(&mut head[read..], read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(EngineError::io("read buffer", path, e)),
        }
    }
    Ok(read < CHUNK_MAGIC.len() || head[..read].iter().all(|&b| b == 0))
}

fn reserve(file: &File, bytes: u64) -> std::io::Result<()> {
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
    if rc == 0 {
        Ok(())
    } else if rc == libc::EOPNOTSUPP {
        // Filesystems without fallocate: size it sparse instead.
        file.set_len(bytes)
    } else {
        Err(std::io::Error::from_raw_os_error(rc))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use wire::chunk::ChunkView;
    use wire::BatchBuilder;

    /// Check the file, then recover what the check found good, as
    /// recovery does.
    fn recovered(path: PathBuf, segment_id: u32, base: u64) -> Result<ActiveBuffer, EngineError> {
        let good = check(&path, segment_id, base, None)?.good_prefix();
        ActiveBuffer::recover(path, segment_id, good)
    }

    fn batch(n: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for i in 0..n {
            b.push(1000 + i as i64, format!("k{i}").as_bytes(), b"value", &[])
                .unwrap();
        }
        b.finish(0, 0).to_vec()
    }

    /// A 64 KiB buffer at `path` for `segment` from `base_offset`, with
    /// `copies` copies of the batch `bytes` appended.
    fn filled(
        path: PathBuf,
        segment: u32,
        base_offset: u64,
        bytes: &[u8],
        copies: usize,
    ) -> ActiveBuffer {
        let mut buf = ActiveBuffer::create(path, segment, base_offset, 64 << 10).unwrap();
        for _ in 0..copies {
            buf.append(&BatchView::validate(bytes).unwrap()).unwrap();
        }
        buf
    }

    #[test]
    fn append_seal_is_a_valid_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let buf = filled(dir.path().join("b"), 3, 10, &batch(5), 20);
        assert_eq!(buf.next_offset(), 110);
        let sealed = buf.seal().unwrap();
        let chunk = ChunkView::open(sealed.chunk_bytes()).unwrap();
        assert_eq!(chunk.header().base_offset, 10);
        assert_eq!(chunk.header().next_offset, 110);
        assert_eq!(chunk.header().segment_id, 3);
        assert_eq!(chunk.batches().count(), 20);
    }

    /// Write-back is due once per `step` bytes appended, over the range
    /// appended since the last, and the ranges cover the file end to end.
    #[test]
    fn writeback_is_due_once_per_step_end_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = batch(5);
        let step = 3 * bytes.len() as u64;
        let mut buf = ActiveBuffer::create(dir.path().join("b"), 1, 0, 64 << 10).unwrap();
        let mut ranges = Vec::new();
        for _ in 0..10 {
            buf.append(&BatchView::validate(&bytes).unwrap()).unwrap();
            ranges.extend(buf.writeback_due(step));
        }
        assert_eq!(ranges.len(), 3, "{ranges:?}");
        assert_eq!(ranges[0].0, 0);
        for w in ranges.windows(2) {
            assert_eq!(w[0].0 + w[0].1, w[1].0, "no gap, no overlap: {ranges:?}");
        }
        assert!(ranges.iter().all(|r| r.1 >= step));
        assert_eq!(buf.writeback_due(step), None, "nothing new appended");
    }

    #[test]
    fn recover_keeps_valid_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        let bytes = batch(3);
        {
            let buf = filled(path.clone(), 1, 0, &bytes, 4);
            // Simulate a torn fifth batch: half its bytes.
            let at = (CHUNK_HEADER_BYTES + buf.data_bytes) as u64;
            let half = bytes.len() / 2;
            buf.mapped.file.write_all_at(&bytes[..half], at).unwrap();
        }
        let buf = recovered(path.clone(), 1, 0).unwrap();
        assert_eq!(buf.next_offset(), 12);
        assert_eq!(buf.data().len(), 4 * bytes.len());
        assert!(recovered(path, 2, 0).is_err(), "wrong segment refused");
    }

    #[test]
    fn spare_becomes_a_buffer_under_its_final_name() {
        let dir = tempfile::tempdir().unwrap();
        let spare = SpareBuffer::create(dir.path().join("spare.buf"), 64 << 10).unwrap();
        let path = dir.path().join("00000000000000000005.buf");
        let mut buf = spare.activate(path.clone(), 2, 5).unwrap();
        assert!(path.exists() && !dir.path().join("spare.buf").exists());
        buf.append(&BatchView::validate(&batch(2)).unwrap())
            .unwrap();
        drop(buf);
        let again = recovered(path, 2, 5).unwrap();
        assert_eq!((again.base_offset(), again.next_offset()), (5, 7));
    }

    /// A sealed buffer's file is cut to its chunk's length before it is
    /// handed over, and the capacity that length implies can be below the
    /// data it holds: recovery must still take every batch (the crash loop
    /// found it cutting off the last one).
    #[test]
    fn recover_a_full_sealed_buffer_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        // Batches larger than the index interval: fewer index entries
        // than a full buffer may have, so the file is shorter than the
        // most a buffer of this capacity could take.
        let mut b = BatchBuilder::new();
        b.push(1_700_000_000_000, b"k", &[7u8; 9_000], &[]).unwrap();
        let bytes = b.finish(0, 0).to_vec();
        let copies = (64 << 10) / bytes.len();
        let sealed = filled(path.clone(), 1, 0, &bytes, copies).seal().unwrap();
        let chunk_bytes = sealed.chunk_bytes().len() as u64;
        drop(sealed);
        // Cut to the chunk's length, as a flush does before handing it over.
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(chunk_bytes).unwrap();
        let again = recovered(path, 1, 0).unwrap();
        assert_eq!(again.next_offset(), copies as u64);
        assert_eq!(again.data().len(), copies * bytes.len());
    }

    #[test]
    fn capacity_inverts() {
        for c in [0u64, 1, 4095, 4096, 65536, 8 << 20, (8 << 20) + 17] {
            assert_eq!(data_capacity_for(chunk_bytes_max(c)), c);
        }
    }

    #[test]
    fn recover_sealed_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        let sealed = filled(path.clone(), 1, 7, &batch(2), 1).seal().unwrap();
        drop(sealed);
        let again = recovered(path, 1, 7).unwrap();
        assert_eq!(again.base_offset(), 7);
        assert_eq!(again.next_offset(), 9);
        let resealed = again.seal().unwrap();
        ChunkView::open(resealed.chunk_bytes()).unwrap();
    }

    #[test]
    fn a_populated_spare_has_its_pages_in_the_page_cache_and_reads_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spare.buf");
        let spare = SpareBuffer::create(path.clone(), 1 << 20).unwrap();
        spare.populate();
        // Every page wholly inside the file (Linux's readahead may leave the
        // one that straddles its end to the first write).
        let whole_pages_end = spare.mapped.bytes().len() / 4096 * 4096;
        let range = crate::file_range::FileRange::new(spare.mapped.clone(), 0, whole_pages_end, 0);
        assert!(range.is_resident(), "every whole page in the page cache");
        let map = spare.mapped.bytes();
        assert!(map.iter().all(|b| *b == 0), "a spare reads as zeros");
    }
}
