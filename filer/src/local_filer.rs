//! [`LocalFiler`]: a [`Filer`] over a local directory.
//!
//! Objects are plain files at `root/<object path>`, so anyone can read them
//! with ordinary tools. Directories are created on demand by `put` and are not
//! objects; empty ones left behind by `delete` are harmless (`list` only
//! reports files) and are not pruned, because pruning would race with a
//! concurrent `put` creating a file in the same directory.
//!
//! Atomicity comes from `rename(2)` over the target; durability from
//! `fdatasync` of the temp file before the rename and `fsync` of the parent
//! directory after it (and after creating or removing directory entries).
//!
//! Limits inherited from the filesystem: an object cannot be both a file and
//! a prefix of other objects (`a` and `a/b`), and a component must leave room
//! for the temp-file suffix within the filesystem's name length limit.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::object_path::{is_temp_name, TEMP_MARKER};
use crate::{Filer, FilerError, ObjectPath, OBJECT_PATH_BYTES_MAX};

/// Largest byte offset a file can have (`off_t` is signed 64-bit).
const FILE_OFFSET_MAX: u64 = i64::MAX as u64;

/// A [`Filer`] that stores each object as a file under a root directory.
#[derive(Debug)]
pub struct LocalFiler {
    root: PathBuf,
    /// Makes temp-file names unique among the threads of this process; the
    /// pid in the name separates processes sharing the directory.
    temp_counter: AtomicU64,
    /// Whether files handed over by `put_file` leave the page cache (see
    /// [`LocalFiler::drop_handed_over_pages`]).
    drop_handed_over_pages: bool,
}

impl LocalFiler {
    /// Use `root` as the store, creating it (and its parents) if missing.
    pub fn open(root: impl Into<PathBuf>) -> Result<LocalFiler, FilerError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_error("create root dir", &root))?;
        Ok(LocalFiler {
            root,
            temp_counter: AtomicU64::new(0),
            drop_handed_over_pages: false,
        })
    }

    /// Drop the pages of files handed over by `put_file` from the page
    /// cache once synced (`true`), or leave them to the kernel (`false`,
    /// the default): see `drop_cached_pages`.
    pub fn drop_handed_over_pages(mut self, drop: bool) -> LocalFiler {
        self.drop_handed_over_pages = drop;
        self
    }

    /// The directory objects are stored under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The filesystem path of the object at `path`. Safe to join: an
    /// [`ObjectPath`] is relative and has no `.` or `..` components.
    pub fn file_path(&self, path: &ObjectPath) -> PathBuf {
        self.root.join(path.as_str())
    }

    /// Write `bytes` to a synced temp file beside the target, then put it
    /// in place: renamed over whatever is there, or hard-linked, which
    /// fails if anything is.
    fn store(
        &self,
        path: &ObjectPath,
        bytes: &[u8],
        placement: Placement,
    ) -> Result<(), FilerError> {
        self.create_parent_dirs(path)?;
        let target = self.file_path(path);
        let parent = target
            .parent()
            .expect("root joined with a non-empty relative path has a parent")
            .to_path_buf();
        let name = path
            .components()
            .last()
            .expect("an ObjectPath has at least one component");
        let counter = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let temp = parent.join(format!(
            ".{name}{TEMP_MARKER}{}-{counter}",
            std::process::id()
        ));
        let written = write_synced(&temp, bytes).and_then(|()| match placement {
            Placement::Replace => fs::rename(&temp, &target).map_err(io_error("rename", &temp)),
            Placement::New => {
                let linked = match fs::hard_link(&temp, &target) {
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                        Err(FilerError::AlreadyExists {
                            path: path.to_string(),
                        })
                    }
                    other => other.map_err(io_error("link", &temp)),
                };
                let _ = fs::remove_file(&temp);
                linked
            }
        });
        if let Err(e) = written {
            // Best effort: the temp file is invisible to list() anyway, and
            // the original error is the one worth reporting.
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        sync_dir(&parent)
    }

    /// Create every missing directory between the root and `target`'s
    /// parent, fsyncing each new entry's parent so the directories survive a
    /// crash along with the file that will be renamed into them.
    fn create_parent_dirs(&self, path: &ObjectPath) -> Result<(), FilerError> {
        let mut components: Vec<&str> = path.components().collect();
        components.pop(); // the object's own name
        if components.is_empty() {
            return Ok(());
        }
        let parent = self.root.join(components.join("/"));
        if fs::metadata(&parent).is_ok_and(|m| m.is_dir()) {
            return Ok(()); // the common case: one stat, no walk
        }
        let mut dir = self.root.clone();
        for component in components {
            let above = dir.clone();
            dir.push(component);
            match fs::create_dir(&dir) {
                Ok(()) => sync_dir(&above)?,
                // Another put may have created it first; that is fine as
                // long as it is a directory and not an object.
                Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => {}
                Err(e) => return Err(io_error("create dir", &dir)(e)),
            }
        }
        Ok(())
    }
}

impl Filer for LocalFiler {
    fn local_file(&self, path: &ObjectPath) -> Option<PathBuf> {
        Some(self.file_path(path))
    }

    fn keeps_local_files(&self) -> bool {
        true
    }

    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        self.store(path, bytes, Placement::Replace)
    }

    fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        self.store(path, bytes, Placement::New)
    }

    fn put_file(&self, path: &ObjectPath, local: &Path, len: u64) -> Result<(), FilerError> {
        // No retry after a failure comes here: a caller whose hand-over
        // failed stores the bytes anew (`put`) or gives them up, since a
        // second sync of the same file can succeed with its pages gone.
        let file = fs::OpenOptions::new()
            .write(true)
            .open(local)
            .map_err(io_error("open", local))?;
        let file_len = file.metadata().map_err(io_error("stat", local))?.len();
        if file_len < len {
            return Err(FilerError::local_file_short("truncate", local));
        }
        file.set_len(len).map_err(io_error("truncate", local))?;
        file.sync_data().map_err(io_error("fdatasync", local))?;
        if self.drop_handed_over_pages {
            drop_cached_pages(&file);
        }
        drop(file);
        self.create_parent_dirs(path)?;
        let target = self.file_path(path);
        // A hard link, not a rename: it fails if the target exists, so a
        // chunk is never replaced; then the buffer's name goes.
        match fs::hard_link(local, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(FilerError::AlreadyExists {
                    path: path.to_string(),
                })
            }
            // Another filesystem: copy the bytes instead.
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                let bytes = fs::read(local).map_err(io_error("read", local))?;
                self.create(path, &bytes)?;
                return fs::remove_file(local).map_err(io_error("remove", local));
            }
            Err(e) => return Err(io_error("link", local)(e)),
        }
        fs::remove_file(local).map_err(io_error("remove", local))?;
        let parent = target
            .parent()
            .expect("root joined with a non-empty relative path has a parent");
        sync_dir(parent)?;
        if let Some(local_dir) = local.parent() {
            sync_dir(local_dir)?;
        }
        Ok(())
    }

    fn read_at(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<usize, FilerError> {
        if buf.is_empty() {
            // No read syscall would tell a directory from a file here.
            return self.size(path).map(|_| 0);
        }
        let file_path = self.file_path(path);
        let file = File::open(&file_path).map_err(not_found_or(path, "open", &file_path))?;
        let mut filled = 0;
        while filled < buf.len() {
            // Files end before i64::MAX (off_t); pread rejects larger offsets.
            let at = offset.saturating_add(filled as u64);
            if at > FILE_OFFSET_MAX {
                break;
            }
            match file.read_at(&mut buf[filled..], at) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A directory opens fine on Linux and fails only here.
                Err(e) => return Err(not_found_or(path, "read", &file_path)(e)),
            }
        }
        Ok(filled)
    }

    fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
        let file_path = self.file_path(path);
        let meta = fs::metadata(&file_path).map_err(not_found_or(path, "stat", &file_path))?;
        if !meta.is_file() {
            return Err(FilerError::NotFound {
                path: path.to_string(),
            });
        }
        Ok(meta.len())
    }

    fn list_children(&self, prefix: &ObjectPath) -> Result<Vec<String>, FilerError> {
        let dir = self.file_path(prefix);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if is_absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(io_error("read dir", &dir)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_error("read dir entry", &dir))?;
            // The same names `list` skips: not UTF-8, temp files, symlinks,
            // and anything that could not be a path component.
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if is_temp_name(&name) || prefix.join(&name).is_err() {
                continue;
            }
            let file_type = match entry.file_type() {
                Ok(t) => t,
                Err(e) if is_absent(&e) => continue,
                Err(e) => return Err(io_error("stat", &entry.path())(e)),
            };
            if file_type.is_dir() || file_type.is_file() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
        let mut found = Vec::new();
        // An explicit stack rather than recursion: depth is bounded only by
        // OBJECT_PATH_BYTES_MAX.
        let mut pending = vec![(self.file_path(prefix), prefix.as_str().to_owned())];
        while let Some((dir, relative)) = pending.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                // Absent, a file, or removed by a concurrent delete: no objects.
                Err(e) if is_absent(&e) => continue,
                Err(e) => return Err(io_error("read dir", &dir)(e)),
            };
            for entry in entries {
                let entry = entry.map_err(io_error("read dir entry", &dir))?;
                // Names that are not UTF-8 or are temp files cannot be
                // objects; they were not written through this API.
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                if is_temp_name(&name) {
                    continue;
                }
                let child = format!("{relative}/{name}");
                if child.len() > OBJECT_PATH_BYTES_MAX {
                    continue;
                }
                let file_type = match entry.file_type() {
                    Ok(t) => t,
                    Err(e) if is_absent(&e) => continue,
                    Err(e) => return Err(io_error("stat", &entry.path())(e)),
                };
                // Symlinks are skipped: following them could escape the root
                // or loop, and put never creates them.
                if file_type.is_dir() {
                    pending.push((entry.path(), child));
                } else if file_type.is_file() {
                    if let Ok(object) = ObjectPath::new(child) {
                        found.push(object);
                    }
                }
            }
        }
        found.sort();
        Ok(found)
    }

    fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
        let target = self.file_path(path);
        let meta = match fs::symlink_metadata(&target) {
            Ok(meta) => meta,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(io_error("stat", &target)(e)),
        };
        let removed = if meta.is_dir() {
            fs::remove_dir_all(&target).map_err(|e| ("remove dir tree", e))
        } else {
            fs::remove_file(&target).map_err(|e| ("remove file", e))
        };
        match removed {
            Ok(()) => {}
            Err((_, e)) if is_absent(&e) => {} // a concurrent delete won
            Err((op, e)) => return Err(io_error(op, &target)(e)),
        }
        let parent = target
            .parent()
            .expect("root joined with a non-empty relative path has a parent");
        match sync_dir(parent) {
            Err(FilerError::Io { source, .. }) if is_absent(&source) => Ok(()),
            other => other,
        }
    }
}

/// How [`LocalFiler::store`] puts a synced temp file in place.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// `put`: over any object there.
    Replace,
    /// `create`: only where none is.
    New,
}

/// Create `temp` (which must not exist), write `bytes`, and fdatasync it.
fn write_synced(temp: &Path, bytes: &[u8]) -> Result<(), FilerError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)
        .map_err(io_error("create temp file", temp))?;
    file.write_all(bytes).map_err(io_error("write", temp))?;
    file.sync_data().map_err(io_error("fdatasync", temp))
}

/// fsync a directory so entries created, renamed or removed in it are durable.
fn sync_dir(dir: &Path) -> Result<(), FilerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("fsync dir", dir))
}

/// True if `e` means "nothing is there": missing, or a path through a file.
fn is_absent(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FilerError + 'a {
    FilerError::local_io(op, path)
}

/// Map "nothing there" (including a directory where an object was expected)
/// to [`FilerError::NotFound`], anything else to [`FilerError::Io`].
fn not_found_or<'a>(
    object: &'a ObjectPath,
    op: &'static str,
    file_path: &'a Path,
) -> impl FnOnce(io::Error) -> FilerError + 'a {
    move |source| {
        if is_absent(&source) || source.kind() == ErrorKind::IsADirectory {
            FilerError::NotFound {
                path: object.to_string(),
            }
        } else {
            io_error(op, file_path)(source)
        }
    }
}

/// Ask the kernel to drop a synced file's pages from the page cache.
///
/// A handed-over file is a sealed segment buffer or a staged payload:
/// readers of a segment's tail are served from the broker's live buffers.
/// Kept pages make every later buffer land in page-cache pages taken from
/// elsewhere; dropped ones let the next buffer reuse the same memory.
/// Where the page cache grows into memory the host has not backed yet (a
/// fresh VM), appends cost 0.9-1.1 CPU s/GB instead of 0.27 (measured on
/// this project's VM, BENCHMARKS.md "Page-cache reuse"); once memory is
/// warm the gain is ~10%, and reading a chunk soon after its flush costs
/// a disk read (2.3x slower there). The pages are clean after the sync, so
/// this only releases them; the advice failing changes nothing.
fn drop_cached_pages(file: &fs::File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: plain syscall on an open descriptor.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn p(path: &str) -> ObjectPath {
        ObjectPath::new(path).unwrap()
    }

    fn filer() -> (tempfile::TempDir, LocalFiler) {
        let dir = tempfile::tempdir().unwrap();
        let filer = LocalFiler::open(dir.path().join("store")).unwrap();
        (dir, filer)
    }

    fn read_all(filer: &LocalFiler, path: &ObjectPath) -> Vec<u8> {
        let mut buf = vec![0; filer.size(path).unwrap() as usize];
        let n = filer.read_at(path, 0, &mut buf).unwrap();
        assert_eq!(n, buf.len());
        buf
    }

    /// How many of the file's pages are in the page cache, of how many.
    fn resident_pages(path: &Path) -> (usize, usize) {
        use std::os::unix::io::AsRawFd;
        let file = fs::File::open(path).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a read-only shared mapping of an open file, unmapped
        // before return; mincore writes one byte per page into `pages`.
        unsafe {
            let addr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(addr, libc::MAP_FAILED);
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let mut pages = vec![0u8; len.div_ceil(page)];
            assert_eq!(libc::mincore(addr, len, pages.as_mut_ptr()), 0);
            libc::munmap(addr, len);
            (pages.iter().filter(|b| **b & 1 != 0).count(), pages.len())
        }
    }

    #[test]
    fn handed_over_files_leave_the_page_cache_when_asked() {
        // On the disk's file system, not a tmpfs /tmp (whose pages are the
        // files themselves).
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        for drop in [false, true] {
            let filer = LocalFiler::open(dir.path().join(format!("store-{drop}")))
                .unwrap()
                .drop_handed_over_pages(drop);
            let local = dir.path().join("buffer");
            std::fs::write(&local, vec![7u8; 1 << 20]).unwrap();
            assert!(
                resident_pages(&local).0 > 0,
                "a file just written is cached"
            );
            filer.put_file(&p("t/chunk"), &local, 1 << 20).unwrap();
            let (resident, pages) = resident_pages(&filer.file_path(&p("t/chunk")));
            let expected = if drop { 0 } else { pages };
            assert_eq!(resident, expected, "resident pages after the hand-over");
        }
    }

    #[test]
    fn put_file_moves_the_file_and_keeps_its_prefix() {
        let (dir, filer) = filer();
        let local = dir.path().join("buffer");
        std::fs::write(&local, b"chunk bytes and spare room").unwrap();
        filer.put_file(&p("t/a/0/1.chunk"), &local, 11).unwrap();
        assert!(!local.exists(), "the file was handed over");
        assert_eq!(read_all(&filer, &p("t/a/0/1.chunk")), b"chunk bytes");
        // A missing local file is an error naming it, and stores nothing.
        let err = filer.put_file(&p("t/a/0/2.chunk"), &local, 1).unwrap_err();
        assert!(err.to_string().contains("buffer"), "{err}");
        assert!(filer.size(&p("t/a/0/2.chunk")).unwrap_err().is_not_found());
    }

    /// The local filer with only the required methods: the trait's defaults
    /// for everything else (what a remote backend without a rename or a
    /// delimiter listing gets).
    #[derive(Debug)]
    struct CopyOnly(LocalFiler);

    impl Filer for CopyOnly {
        fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
            self.0.put(path, bytes)
        }
        fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
            self.0.create(path, bytes)
        }
        fn read_at(
            &self,
            path: &ObjectPath,
            offset: u64,
            buf: &mut [u8],
        ) -> Result<usize, FilerError> {
            self.0.read_at(path, offset, buf)
        }
        fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
            self.0.size(path)
        }
        fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
            self.0.list(prefix)
        }
        fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
            self.0.delete(path)
        }
    }

    #[test]
    fn default_put_file_copies_then_removes() {
        let (dir, filer) = filer();
        let copy = CopyOnly(filer);
        let local = dir.path().join("buffer");
        std::fs::write(&local, b"0123456789").unwrap();
        assert!(
            copy.put_file(&p("x/y"), &local, 20).is_err(),
            "longer than the file"
        );
        copy.put_file(&p("x/y"), &local, 4).unwrap();
        assert!(!local.exists());
        assert_eq!(read_all(&copy.0, &p("x/y")), b"0123");
    }

    #[test]
    fn list_children_is_one_level_and_agrees_with_the_default() {
        let (_dir, filer) = filer();
        for path in ["t/a/x", "t/a/y/z", "t/a.b", "t/c", "t/d/e/f", "u/v"] {
            filer.put(&p(path), b"1").unwrap();
        }
        let want = vec!["a", "a.b", "c", "d"];
        assert_eq!(filer.list_children(&p("t")).unwrap(), want);
        assert!(filer.list_children(&p("absent")).unwrap().is_empty());
        assert_eq!(CopyOnly(filer).list_children(&p("t")).unwrap(), want);
    }

    #[test]
    fn open_creates_root() {
        let (dir, filer) = filer();
        assert!(dir.path().join("store").is_dir());
        assert_eq!(filer.root(), dir.path().join("store"));
    }

    #[test]
    fn open_fails_on_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"x").unwrap();
        let err = LocalFiler::open(&file).unwrap_err();
        assert!(
            matches!(
                err,
                FilerError::Io {
                    op: "create root dir",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn put_then_read_and_size() {
        let (_dir, filer) = filer();
        let path = p("topics/ns/t/topic.json");
        filer.put(&path, b"hello world").unwrap();
        assert_eq!(filer.size(&path).unwrap(), 11);
        assert_eq!(read_all(&filer, &path), b"hello world");
        let mut buf = [0; 5];
        assert_eq!(filer.read_at(&path, 6, &mut buf).unwrap(), 5);
        assert_eq!(&buf, b"world");
        // A plain file anyone can read.
        assert_eq!(fs::read(filer.file_path(&path)).unwrap(), b"hello world");
    }

    #[test]
    fn put_empty_object() {
        let (_dir, filer) = filer();
        let path = p("empty");
        filer.put(&path, b"").unwrap();
        assert_eq!(filer.size(&path).unwrap(), 0);
        assert_eq!(filer.read_at(&path, 0, &mut [0; 4]).unwrap(), 0);
    }

    #[test]
    fn overwrite_replaces_whole_object() {
        let (_dir, filer) = filer();
        let path = p("a/b");
        filer.put(&path, b"a long first version").unwrap();
        filer.put(&path, b"short").unwrap();
        assert_eq!(read_all(&filer, &path), b"short");
        assert_eq!(filer.list(&p("a")).unwrap(), vec![path]);
    }

    #[test]
    fn short_read_at_end_of_object() {
        let (_dir, filer) = filer();
        let path = p("obj");
        filer.put(&path, b"0123456789").unwrap();
        let mut buf = [0xAA; 8];
        assert_eq!(filer.read_at(&path, 6, &mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"6789");
        assert_eq!(filer.read_at(&path, 10, &mut buf).unwrap(), 0);
        assert_eq!(filer.read_at(&path, 1000, &mut buf).unwrap(), 0);
        assert_eq!(filer.read_at(&path, u64::MAX, &mut buf).unwrap(), 0);
        assert_eq!(filer.read_at(&path, 3, &mut []).unwrap(), 0);
    }

    #[test]
    fn not_found_everywhere() {
        let (_dir, filer) = filer();
        filer.put(&p("dir/file"), b"x").unwrap();
        for missing in ["nope", "dir/nope", "dir", "dir/file/below"] {
            let path = p(missing);
            let err = filer.size(&path).unwrap_err();
            assert!(err.is_not_found(), "size {missing}: {err}");
            let err = filer.read_at(&path, 0, &mut [0; 4]).unwrap_err();
            assert!(err.is_not_found(), "read_at {missing}: {err}");
            let err = filer.read_at(&path, 0, &mut []).unwrap_err();
            assert!(err.is_not_found(), "empty read_at {missing}: {err}");
        }
        assert_eq!(
            filer.size(&p("nope")).unwrap_err().to_string(),
            "object not found: nope"
        );
    }

    #[test]
    fn list_is_recursive_sorted_and_prefix_scoped() {
        let (_dir, filer) = filer();
        for path in ["t/b", "t/a/2", "t/a/1", "t/c/d/e", "tt/x", "t"] {
            // "t" as a file would collide with the "t/" directory, so it goes
            // to a sibling prefix instead.
            let path = if path == "t" { "u" } else { path };
            filer.put(&p(path), path.as_bytes()).unwrap();
        }
        let listed: Vec<String> = filer
            .list(&p("t"))
            .unwrap()
            .iter()
            .map(|o| o.to_string())
            .collect();
        assert_eq!(listed, ["t/a/1", "t/a/2", "t/b", "t/c/d/e"]);
        assert_eq!(filer.list(&p("t/a")).unwrap(), vec![p("t/a/1"), p("t/a/2")]);
        assert!(filer.list(&p("missing")).unwrap().is_empty());
        // The prefix names an object, not a directory: nothing under it.
        assert!(filer.list(&p("u")).unwrap().is_empty());
        assert!(filer.list(&p("t/b")).unwrap().is_empty());
    }

    #[test]
    fn list_ignores_temp_files_and_foreign_names() {
        let (_dir, filer) = filer();
        filer.put(&p("d/real"), b"x").unwrap();
        let dir = filer.root().join("d");
        // What a crashed put leaves behind.
        fs::write(dir.join(".real.tmp-4242-7"), b"torn").unwrap();
        fs::write(dir.join(".other.tmp-1-0"), b"torn").unwrap();
        // Not expressible as an ObjectPath.
        fs::write(dir.join("back\\slash"), b"x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        assert_eq!(filer.list(&p("d")).unwrap(), vec![p("d/real")]);
        // A dot-file that is not shaped like a temp file is an object.
        filer.put(&p("d/.hidden"), b"x").unwrap();
        assert_eq!(
            filer.list(&p("d")).unwrap(),
            vec![p("d/.hidden"), p("d/real")]
        );
    }

    #[test]
    fn put_leaves_no_temp_files() {
        let (_dir, filer) = filer();
        for i in 0..10 {
            filer.put(&p("d/obj"), format!("{i}").as_bytes()).unwrap();
        }
        let names: Vec<_> = fs::read_dir(filer.root().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["obj"]);
    }

    #[test]
    fn delete_file_tree_and_nothing() {
        let (_dir, filer) = filer();
        for path in ["t/a/1", "t/a/2", "t/b", "keep/x"] {
            filer.put(&p(path), b"x").unwrap();
        }
        filer.delete(&p("t/b")).unwrap();
        assert!(filer.size(&p("t/b")).unwrap_err().is_not_found());
        assert_eq!(filer.list(&p("t")).unwrap(), vec![p("t/a/1"), p("t/a/2")]);
        filer.delete(&p("t")).unwrap();
        assert!(filer.list(&p("t")).unwrap().is_empty());
        assert!(filer.size(&p("t/a/1")).unwrap_err().is_not_found());
        // Deleting nothing, or below a file, is Ok.
        filer.delete(&p("t")).unwrap();
        filer.delete(&p("never/existed")).unwrap();
        filer.delete(&p("keep/x/below")).unwrap();
        assert_eq!(read_all(&filer, &p("keep/x")), b"x");
        // A deleted prefix can be written again.
        filer.put(&p("t/a/1"), b"again").unwrap();
        assert_eq!(read_all(&filer, &p("t/a/1")), b"again");
    }

    #[test]
    fn put_over_a_prefix_is_an_io_error() {
        let (_dir, filer) = filer();
        filer.put(&p("a/b"), b"x").unwrap();
        let err = filer.put(&p("a"), b"y").unwrap_err();
        assert!(matches!(err, FilerError::Io { op: "rename", .. }), "{err}");
        let err = filer.put(&p("a/b/c"), b"y").unwrap_err();
        assert!(
            matches!(
                err,
                FilerError::Io {
                    op: "create dir",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("a/b"), "{err}");
        // Neither failure left a temp file or changed the object.
        assert_eq!(filer.list(&p("a")).unwrap(), vec![p("a/b")]);
        assert_eq!(read_all(&filer, &p("a/b")), b"x");
    }

    #[test]
    fn concurrent_puts_to_different_paths() {
        let (_dir, filer) = filer();
        let objects_per_thread = 50;
        std::thread::scope(|s| {
            for thread in 0..2 {
                let filer = &filer;
                s.spawn(move || {
                    for i in 0..objects_per_thread {
                        let path = p(&format!("c/shared/{thread}-{i}"));
                        filer.put(&path, path.as_str().as_bytes()).unwrap();
                    }
                });
            }
        });
        let listed = filer.list(&p("c")).unwrap();
        assert_eq!(listed.len(), 2 * objects_per_thread);
        for path in listed {
            assert_eq!(read_all(&filer, &path), path.as_str().as_bytes());
        }
    }

    #[test]
    fn concurrent_puts_to_one_path_never_tear() {
        let (_dir, filer) = filer();
        let path = p("same");
        let versions = [vec![b'a'; 4096], vec![b'b'; 8192]];
        std::thread::scope(|s| {
            for version in &versions {
                let (filer, path) = (&filer, &path);
                s.spawn(move || {
                    for _ in 0..20 {
                        filer.put(path, version).unwrap();
                    }
                });
            }
        });
        let got = read_all(&filer, &path);
        assert!(versions.contains(&got));
    }

    #[test]
    fn works_through_the_trait_object() {
        let (_dir, filer) = filer();
        let filer: std::sync::Arc<dyn Filer> = std::sync::Arc::new(filer);
        filer.put(&p("x/y"), b"z").unwrap();
        assert_eq!(filer.list(&p("x")).unwrap(), vec![p("x/y")]);
    }
}
