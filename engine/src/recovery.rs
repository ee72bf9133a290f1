//! A segment's buffers after a restart: what an earlier run left under
//! `<data-dir>/buffers/<topic>/<segment>/`, read back before the segment
//! serves, so offsets continue where they stopped and nothing acknowledged
//! is lost or hidden.
//!
//! A buffer whose batches all check out is taken as it is. One that does
//! not (a byte flipped on disk, a write cut short by a crash, a damaged
//! header) is salvaged, loudly:
//!
//! 1. the file is copied, as it is, to `<data-dir>/quarantine/<topic>/
//!    <segment>/` for the operator;
//! 2. every damaged stretch is recorded in the filer as a lost range
//!    (`filer_layout::lost_range`), offsets and bytes, before anything else
//!    changes: those offsets are never handed out again, and readers skip
//!    them;
//! 3. every run of good batches after the first goes into a buffer file of
//!    its own, named by its base offset, made durable;
//! 4. only then is the damaged file cut to its first run (its header
//!    rewritten if that was the damage), and the segment opens with every
//!    run as a buffer to flush.
//!
//! A crash at any step leaves the damaged file as it was until step 4, so
//! the next start does the same again (each step overwrites what an
//! interrupted one made with the same bytes).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use control::{filer_layout, TopicName};
use filer::Filer;
use wire::batch::BatchView;

use crate::buffer::{self, ActiveBuffer, BufferCheck};
use crate::error::EngineError;

/// Spare buffer files are named `spare-...buf`; recovery removes them.
pub(crate) fn is_spare_file(name: &str) -> bool {
    name.starts_with(buffer::SPARE_PREFIX) && name.ends_with(".buf")
}

/// Where one segment's buffers are, and where damaged ones are kept.
#[derive(Debug, Clone)]
pub(crate) struct SegmentDirs {
    pub(crate) buffers: PathBuf,
    pub(crate) quarantine: PathBuf,
}

/// Offsets `[from, to)` whose records could not be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LostRange {
    pub(crate) from: u64,
    pub(crate) to: u64,
}

/// Record `[from, to)` of `segment` as lost in the filer (durably, before
/// the offsets after it are served).
pub(crate) fn record_lost(
    filer: &dyn Filer,
    topic: &TopicName,
    segment: u32,
    lost: LostRange,
    bytes: u64,
    reason: &str,
) -> Result<(), EngineError> {
    let path = filer_layout::lost_range(topic, segment, lost.from, lost.to);
    let content = filer_layout::lost_range_content(segment, lost.from, lost.to, bytes, reason);
    filer.put(&path, &content)?;
    Ok(())
}

/// The buffers an earlier run left for `segment_id`, oldest first, every
/// damaged one salvaged (module doc).
pub(crate) fn recover_buffers(
    dirs: &SegmentDirs,
    segment_id: u32,
    filer: &dyn Filer,
    topic: &TopicName,
) -> Result<Vec<ActiveBuffer>, EngineError> {
    let paths = list_buffers(&dirs.buffers)?;
    let mut out = Vec::new();
    // Run files a salvage below made (again) in this pass: the listing,
    // taken before, may hold them from an interrupted earlier salvage.
    let mut made = HashSet::new();
    for (i, (base, path)) in paths.iter().enumerate() {
        if made.contains(base) {
            continue;
        }
        let next_base = paths.get(i + 1).map(|(b, _)| *b);
        let check = buffer::check(path, segment_id, *base, next_base)?;
        if !check.is_clean() {
            let runs = salvage(dirs, path, *base, segment_id, &check, filer, topic)?;
            made.extend(runs.iter().map(|r| r.base_offset()));
            out.push(ActiveBuffer::recover(path.clone(), segment_id)?);
            out.extend(runs);
            continue;
        }
        out.push(ActiveBuffer::recover(path.clone(), segment_id)?);
    }
    Ok(out)
}

/// Buffer files of one segment by base offset; spares and files that never
/// held a record are removed on the way.
fn list_buffers(dir: &Path) -> Result<Vec<(u64, PathBuf)>, EngineError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(EngineError::io("read dir", dir, e)),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io("read dir", dir, e))?;
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // Spares an earlier run made but never used hold no records.
        if is_spare_file(name) {
            std::fs::remove_file(&path).map_err(|e| EngineError::io("remove", &path, e))?;
            continue;
        }
        let Some(base) = name
            .strip_suffix(".buf")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if buffer::never_held_a_record(&path)? {
            log::warn!(
                "buffer {} holds no record (a crash or a full disk while it was made); \
                 removing it",
                path.display()
            );
            std::fs::remove_file(&path).map_err(|e| EngineError::io("remove", &path, e))?;
            continue;
        }
        paths.push((base, path));
    }
    paths.sort();
    Ok(paths)
}

/// Steps 1-3 of the module doc for the damaged buffer at `path`, then the
/// header repair of step 4. Returns the buffers made for the runs after
/// the first; the caller recovers `path` itself (its first run).
fn salvage(
    dirs: &SegmentDirs,
    path: &Path,
    base_offset: u64,
    segment_id: u32,
    check: &BufferCheck,
    filer: &dyn Filer,
    topic: &TopicName,
) -> Result<Vec<ActiveBuffer>, EngineError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let kept = dirs.quarantine.join(&name);
    log::error!(
        "segment {topic}/{segment_id}: buffer {} is damaged{}; a copy is kept at {}",
        path.display(),
        if check.header_ok {
            ""
        } else {
            " (its header too)"
        },
        kept.display()
    );
    quarantine(path, &kept)?;

    for damage in &check.scan.damage {
        let lost = LostRange {
            from: damage.from_offset,
            to: damage.to_offset,
        };
        let bytes = (damage.to - damage.from) as u64;
        log::error!(
            "segment {topic}/{segment_id}: offsets {}..{} ({} records) are lost: {bytes} \
             bytes of {name} from byte {} fail their checksum (a write cut short by a crash \
             was never acknowledged; anything else was). They are recorded in the filer and \
             never given to other records; readers skip them",
            lost.from,
            lost.to,
            lost.to - lost.from,
            damage.from,
        );
        let reason = format!(
            "buffer {name}: {bytes} bytes from data byte {} do not verify; a copy is kept at {}",
            damage.from,
            kept.display()
        );
        record_lost(filer, topic, segment_id, lost, bytes, &reason)?;
    }

    let data = check.data();
    let mut made = Vec::new();
    for run in check.scan.runs.iter().filter(|r| r.from > 0) {
        let run_path = dirs.buffers.join(format!("{:020}.buf", run.base_offset));
        let mut buffer =
            ActiveBuffer::create(run_path, segment_id, run.base_offset, run.to - run.from)?;
        let mut at = run.from;
        while at < run.to {
            let len = BatchView::peek_len(&data[at..]).unwrap_or(0) as usize;
            let batch = data
                .get(at..at + len)
                .and_then(|b| BatchView::validate(b).ok())
                .ok_or_else(|| EngineError::Corrupt {
                    what: format!("buffer {}", path.display()),
                    reason: format!("its bytes changed while it was salvaged (at {at})"),
                })?;
            buffer.append(&batch)?;
            at += len;
        }
        buffer.sync()?;
        log::warn!(
            "segment {topic}/{segment_id}: kept offsets {}..{} of {name} (after the damage) \
             in a buffer of their own",
            run.base_offset,
            run.next_offset
        );
        made.push(buffer);
    }
    if !check.header_ok {
        buffer::rewrite_header(path, segment_id, base_offset)?;
    }
    Ok(made)
}

/// Copy `path` to `kept` (through a temp name, synced), replacing an
/// earlier copy of an interrupted salvage.
fn quarantine(path: &Path, kept: &Path) -> Result<(), EngineError> {
    let dir = kept.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| EngineError::io("create dir", dir, e))?;
    let temp = kept.with_extension("tmp");
    std::fs::copy(path, &temp).map_err(|e| EngineError::io("quarantine buffer", &temp, e))?;
    std::fs::File::open(&temp)
        .and_then(|f| f.sync_all())
        .map_err(|e| EngineError::io("sync", &temp, e))?;
    std::fs::rename(&temp, kept).map_err(|e| EngineError::io("rename", &temp, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| EngineError::io("sync dir", dir, e))
}
