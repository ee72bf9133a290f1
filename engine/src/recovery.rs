//! A segment's buffers after a restart: what an earlier run left under
//! `<data-dir>/buffers/<topic>/<segment>/`, read back before the segment
//! serves, so offsets continue where they stopped and nothing acknowledged
//! is lost or hidden.
//!
//! A buffer whose batches all check out is taken as it is. One that does
//! not (a byte flipped on disk, a write cut short by a crash, a damaged
//! header) is salvaged, loudly:
//!
//! 1. the bytes that do not verify (each damaged stretch, or the header)
//!    are copied to `<data-dir>/quarantine/<topic>/<segment>/` for the
//!    operator, within `QUARANTINE_BYTES_MAX` per segment (a copy that
//!    does not fit, or fails, is logged and skipped: it is for people, and
//!    a full disk must not stop the broker);
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

/// Bytes of damaged data kept under one segment's quarantine directory;
/// past it (a broker killed mid-write again and again), more is not kept.
const QUARANTINE_BYTES_MAX: u64 = 64 << 20;

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
            out.push(ActiveBuffer::recover(
                path.clone(),
                segment_id,
                check.good_prefix(),
            )?);
            out.extend(runs);
            continue;
        }
        out.push(ActiveBuffer::recover(
            path.clone(),
            segment_id,
            check.good_prefix(),
        )?);
    }
    Ok(out)
}

/// What buffers an earlier run left held of a segment sealed while the
/// broker was away, by where their records fall against its seal point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Leftovers {
    /// Records below the seal point: the filer has them (the seal point is
    /// the end of what the filer holds).
    pub(crate) stored: u64,
    /// Records at or past the seal point: never stored, dropped.
    pub(crate) dropped: u64,
    /// The offsets the dropped records held: `[seal point, end)`.
    pub(crate) end: u64,
}

/// The rule for buffers a restarted broker finds under `dir` for segment
/// `segment_id`, sealed at `seal_point` while it was away: records below
/// the seal point are in the filer already, records from it on were never
/// stored and are dropped. Every buffer file goes (the directory with
/// them); the caller logs what [`Leftovers`] counts. Damaged bytes count
/// as neither (they held no readable record).
pub(crate) fn drop_leftover_buffers(
    dir: &Path,
    segment_id: u32,
    seal_point: u64,
) -> Result<Leftovers, EngineError> {
    let paths = list_buffers(dir)?;
    let mut leftovers = Leftovers {
        end: seal_point,
        ..Leftovers::default()
    };
    for (i, (base, path)) in paths.iter().enumerate() {
        let next_base = paths.get(i + 1).map(|(b, _)| *b);
        let check = buffer::check(path, segment_id, *base, next_base)?;
        for run in &check.scan.runs {
            let below = run
                .next_offset
                .min(seal_point)
                .saturating_sub(run.base_offset);
            leftovers.stored += below;
            leftovers.dropped += (run.next_offset - run.base_offset) - below;
            leftovers.end = leftovers.end.max(run.next_offset);
        }
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(leftovers),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(leftovers),
        Err(e) => Err(EngineError::io("remove", dir, e)),
    }
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
    let only_cut_short = check.header_ok && check.scan.damage.iter().all(|d| d.cut_short);
    if !only_cut_short {
        log::error!(
            "segment {topic}/{segment_id}: buffer {} is damaged{}",
            path.display(),
            if check.header_ok {
                ""
            } else {
                " (its header too)"
            },
        );
    }
    let data = check.data();
    if !check.header_ok {
        keep(dirs, &format!("{name}.header"), check.header());
    }
    for damage in &check.scan.damage {
        let lost = LostRange {
            from: damage.from_offset,
            to: damage.to_offset,
        };
        let bytes = (damage.to - damage.from) as u64;
        let kept = format!("{name}.{}-{}", lost.from, lost.to);
        let kept = match keep(dirs, &kept, &data[damage.from..damage.to]) {
            Some(path) => format!("a copy is kept at {}", path.display()),
            None => "no copy is kept".to_owned(),
        };
        if damage.cut_short {
            // The usual picture after a kill in the middle of a write.
            log::warn!(
                "segment {topic}/{segment_id}: the last batch of {name} (offsets {}..{}, \
                 {bytes} bytes written from data byte {}) was cut short by the crash, so it \
                 was never acknowledged; its offsets are fenced off, recorded in the filer \
                 and skipped by readers; {kept}",
                lost.from,
                lost.to,
                damage.from,
            );
        } else {
            log::error!(
                "segment {topic}/{segment_id}: offsets {}..{} ({} records) are lost: {bytes} \
                 bytes of {name} from data byte {} fail their checksum; {kept}. They are \
                 recorded in the filer and never given to other records; readers skip them",
                lost.from,
                lost.to,
                lost.to - lost.from,
                damage.from,
            );
        }
        let reason = format!(
            "buffer {name}: {bytes} bytes from data byte {} do not verify{}; {kept}",
            damage.from,
            if damage.cut_short {
                " (a last write cut short by a crash, never acknowledged)"
            } else {
                ""
            },
        );
        record_lost(filer, topic, segment_id, lost, bytes, &reason)?;
    }

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

/// Keep `bytes` as `name` in the segment's quarantine directory (through a
/// temp name, synced; replacing the copy an interrupted salvage made),
/// unless that would pass `QUARANTINE_BYTES_MAX` or the disk refuses:
/// then say so and keep nothing. Where it is kept, if it is.
fn keep(dirs: &SegmentDirs, name: &str, bytes: &[u8]) -> Option<PathBuf> {
    if bytes.is_empty() {
        return None;
    }
    let dir = &dirs.quarantine;
    let kept = dir.join(name);
    let held: u64 = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path() != kept)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    if held + bytes.len() as u64 > QUARANTINE_BYTES_MAX {
        log::warn!(
            "quarantine {} holds {held} bytes already: {name} ({} bytes) is not kept",
            dir.display(),
            bytes.len()
        );
        return None;
    }
    let temp = dir.join(format!(".{name}.tmp"));
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&temp, bytes))
        .and_then(|()| std::fs::File::open(&temp)?.sync_all())
        .and_then(|()| std::fs::rename(&temp, &kept))
        .and_then(|()| std::fs::File::open(dir)?.sync_all());
    match written {
        Ok(()) => Some(kept),
        Err(e) => {
            log::warn!("quarantine {}: {e}; {name} is not kept", dir.display());
            let _ = std::fs::remove_file(&temp);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Copies are kept up to the bound, and one that would pass it is
    /// not (repeated crashes cannot fill the disk with them).
    #[test]
    fn quarantine_keeps_copies_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = SegmentDirs {
            buffers: dir.path().join("buffers"),
            quarantine: dir.path().join("quarantine"),
        };
        let big = vec![7u8; (QUARANTINE_BYTES_MAX / 2) as usize];
        let first = keep(&dirs, "a.buf.0-10", &big).unwrap();
        assert_eq!(std::fs::read(&first).unwrap(), big);
        // The same name again replaces its own copy: still within.
        assert!(keep(&dirs, "a.buf.0-10", &big).is_some());
        assert!(keep(&dirs, "b.buf.0-10", &big).is_some());
        assert!(keep(&dirs, "c.buf.0-10", b"one byte too many").is_none());
        assert!(!dirs.quarantine.join("c.buf.0-10").exists());
        assert!(keep(&dirs, "empty", b"").is_none());
    }
}
