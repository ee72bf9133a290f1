//! [`S3Filer`]: the filer on an S3-compatible object store, through the
//! `object_store` crate.
//!
//! Every [`ObjectPath`] is the key `PREFIX/path` in one bucket. The trait's
//! calls are synchronous; each is run as a task on the filer's own small
//! tokio runtime and the calling thread waits for its answer, so a caller
//! on any thread (a glommio blocking thread, a tokio blocking task, a plain
//! thread) can use it.
//!
//! What each call is on the wire:
//!
//! | call | S3 requests |
//! |---|---|
//! | `put` | one `PutObject` |
//! | `create` | one `PutObject` with `If-None-Match: *` (HTTP 412 is [`FilerError::AlreadyExists`]) |
//! | `put_file` | the same conditional `PutObject`, its body the file's pages through a read-only mapping (no copy of the chunk on the heap) |
//! | `read_at` | one ranged `GetObject` (`Range: bytes=a-b`); a `HeadObject` too only when the range starts at or past the end |
//! | `size` | one `HeadObject` |
//! | `list` | `ListObjectsV2` pages under `PREFIX/path/`, every page followed |
//! | `list_children` | `ListObjectsV2` with delimiter `/`, every page followed |
//! | `delete` | `DeleteObject`, then `ListObjectsV2` and `DeleteObjects` for what is below |
//!
//! A put that `object_store` retried after a lost answer may find its own
//! first attempt already stored and report [`FilerError::AlreadyExists`]:
//! callers that create compare what is there with what they meant to store
//! (see the flusher in kelp-engine).

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::path::Path as LocalPath;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig};

use filer::{Filer, FilerError, ObjectPath};

/// Threads of the filer's runtime: the requests are I/O-bound, and every
/// caller blocks its own thread meanwhile.
const RUNTIME_THREADS: usize = 2;

/// How to reach the store, beyond what the standard AWS environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...) says: each
/// field given overrides the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// The store's URL, e.g. `http://127.0.0.1:9000`; AWS itself if none.
    pub endpoint: Option<String>,
    /// The region to sign for.
    pub region: Option<String>,
    /// Allow a plain-HTTP endpoint (a local test server, a store behind a
    /// trusted network).
    pub allow_http: Option<bool>,
    /// Static credentials (for programs that do not read them from the
    /// environment; kelp's own commands do, and take no secret as a flag).
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// How long `object_store` retries a failed request (with backoff)
    /// before the call fails; [`S3_RETRY_TIMEOUT_DEFAULT`] if none.
    pub retry_timeout: Option<Duration>,
}

/// A request is retried for this long before its call fails: long enough
/// to ride out a store's restart, short enough that the caller (the
/// flusher, with its own backoff) hears of an outage and says so.
pub const S3_RETRY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// A filer on one bucket of an S3-compatible store.
pub struct S3Filer {
    store: Arc<AmazonS3>,
    bucket: String,
    /// The key prefix with its trailing `/`, or empty.
    prefix: String,
    /// `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for S3Filer {
    /// Without waiting: the last handle may go from inside an async task
    /// (a client dropped on its tokio runtime), where a blocking shutdown
    /// panics. No call is in flight once the filer itself is dropped.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for S3Filer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3Filer(s3://{}/{})", self.bucket, self.prefix)
    }
}

impl S3Filer {
    /// A filer on `bucket`, keeping its objects under `prefix/` (no leading
    /// or trailing `/`; empty for the bucket's root). Nothing is sent until
    /// the first call.
    pub fn open(bucket: &str, prefix: &str, settings: &S3Settings) -> Result<S3Filer, FilerError> {
        let location = format!("s3://{bucket}/{prefix}");
        let config = |reason: String| FilerError::Config {
            location: location.clone(),
            reason,
        };
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(endpoint) = &settings.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(region) = &settings.region {
            builder = builder.with_region(region);
        }
        if let Some(allow) = settings.allow_http {
            builder = builder.with_allow_http(allow);
        }
        let retry = RetryConfig {
            retry_timeout: settings.retry_timeout.unwrap_or(S3_RETRY_TIMEOUT_DEFAULT),
            ..RetryConfig::default()
        };
        builder = builder.with_retry(retry);
        if let Some(id) = &settings.access_key_id {
            builder = builder.with_access_key_id(id);
        }
        if let Some(secret) = &settings.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        let store = builder.build().map_err(|e| config(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("kelp-s3")
            .enable_all()
            .build()
            .map_err(|e| config(format!("start the object store runtime: {e}")))?;
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Ok(S3Filer {
            store: Arc::new(store),
            bucket: bucket.to_owned(),
            prefix,
            runtime: Some(runtime),
        })
    }

    /// The bucket's key for `path`.
    fn key(&self, path: &ObjectPath) -> Result<Path, FilerError> {
        let key = format!("{}{}", self.prefix, path.as_str());
        Path::parse(&key).map_err(|e| FilerError::InvalidPath {
            path: path.to_string(),
            reason: leak_reason(&e),
        })
    }

    /// The object path of a key this filer listed, if it is one of its own.
    fn object_path(&self, key: &Path) -> Option<ObjectPath> {
        let rest = key.as_ref().strip_prefix(self.prefix.as_str())?;
        ObjectPath::new(rest).ok()
    }

    /// Run `work` on the runtime and wait for its result on this thread.
    fn run<T, F>(&self, work: F) -> T
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let runtime = self
            .runtime
            .as_ref()
            .expect("the runtime is there until the filer is dropped");
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .expect("the filer runtime dropped a request (it panicked)")
    }

    fn put_mode(
        &self,
        path: &ObjectPath,
        payload: PutPayload,
        mode: PutMode,
    ) -> Result<(), FilerError> {
        let key = self.key(path)?;
        let store = self.store.clone();
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let result = self.run(async move { store.put_opts(&key, payload, options).await });
        match result {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => Err(FilerError::AlreadyExists {
                path: path.to_string(),
            }),
            Err(e) => Err(remote("put", path, &e)),
        }
    }
}

impl Filer for S3Filer {
    fn put(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        self.put_mode(path, payload, PutMode::Overwrite)
    }

    fn create(&self, path: &ObjectPath, bytes: &[u8]) -> Result<(), FilerError> {
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        self.put_mode(path, payload, PutMode::Create)
    }

    fn put_file(&self, path: &ObjectPath, local: &LocalPath, len: u64) -> Result<(), FilerError> {
        let io = |op| FilerError::local_io(op, local);
        let file = File::open(local).map_err(io("open"))?;
        let file_len = file.metadata().map_err(io("stat"))?.len();
        if file_len < len {
            return Err(FilerError::local_file_short("read", local));
        }
        let payload = if len == 0 {
            PutPayload::new()
        } else {
            // SAFETY: the file is a sealed buffer or payload, which nothing
            // writes once handed over; the mapping is read-only.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io("mmap"))?;
            let bytes = Bytes::from_owner(map).slice(..len as usize);
            PutPayload::from(bytes)
        };
        drop(file);
        self.put_mode(path, payload, PutMode::Create)?;
        std::fs::remove_file(local).map_err(io("remove"))
    }

    fn read_at(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<usize, FilerError> {
        if buf.is_empty() {
            return self.size(path).map(|_| 0);
        }
        let key = self.key(path)?;
        let store = self.store.clone();
        let end = offset.saturating_add(buf.len() as u64);
        let range_key = key.clone();
        let got = self.run(async move { store.get_range(&range_key, offset..end).await });
        let bytes = match got {
            Ok(bytes) => bytes,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(FilerError::NotFound {
                    path: path.to_string(),
                })
            }
            // A range starting at or past the end is refused (HTTP 416)
            // by some stores and cut short by others: ask for the size.
            Err(e) => {
                let size = self.size(path)?;
                if offset >= size {
                    return Ok(0);
                }
                if end > size {
                    let store = self.store.clone();
                    self.run(async move { store.get_range(&key, offset..size).await })
                        .map_err(|e| remote("get range", path, &e))?
                } else {
                    return Err(remote("get range", path, &e));
                }
            }
        };
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        Ok(n)
    }

    fn size(&self, path: &ObjectPath) -> Result<u64, FilerError> {
        let key = self.key(path)?;
        let store = self.store.clone();
        match self.run(async move { store.head(&key).await }) {
            Ok(meta) => Ok(meta.size),
            Err(object_store::Error::NotFound { .. }) => Err(FilerError::NotFound {
                path: path.to_string(),
            }),
            Err(e) => Err(remote("head", path, &e)),
        }
    }

    fn list(&self, prefix: &ObjectPath) -> Result<Vec<ObjectPath>, FilerError> {
        let key = self.key(prefix)?;
        let store = self.store.clone();
        let keys = self.run(async move {
            let mut stream = store.list(Some(&key));
            let mut keys = Vec::new();
            while let Some(meta) = stream.next().await {
                keys.push(meta?.location);
            }
            Ok::<_, object_store::Error>(keys)
        });
        let keys = keys.map_err(|e| remote("list", prefix, &e))?;
        let mut paths: Vec<ObjectPath> = keys.iter().filter_map(|k| self.object_path(k)).collect();
        paths.sort();
        Ok(paths)
    }

    fn list_children(&self, prefix: &ObjectPath) -> Result<Vec<String>, FilerError> {
        let key = self.key(prefix)?;
        let store = self.store.clone();
        let listed = self
            .run(async move { store.list_with_delimiter(Some(&key)).await })
            .map_err(|e| remote("list", prefix, &e))?;
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .chain(listed.objects.iter().map(|o| &o.location))
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn delete(&self, path: &ObjectPath) -> Result<(), FilerError> {
        let key = self.key(path)?;
        let below = self.list(path)?;
        let mut keys = Vec::with_capacity(below.len() + 1);
        keys.push(key);
        for p in &below {
            keys.push(self.key(p)?);
        }
        let store = self.store.clone();
        let result = self.run(async move {
            let locations = futures_lite::stream::iter(keys.into_iter().map(Ok)).boxed();
            let mut deleted = store.delete_stream(locations);
            while let Some(result) = deleted.next().await {
                match result {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        result.map_err(|e| remote("delete", path, &e))
    }
}

fn remote(op: &'static str, path: &ObjectPath, e: &object_store::Error) -> FilerError {
    FilerError::Remote {
        op,
        path: path.to_string(),
        message: e.to_string(),
    }
}

/// `InvalidPath` holds a static reason; keys that `ObjectPath` accepted
/// and `object_store` refuses are rare enough to name the class only.
fn leak_reason(e: &object_store::path::Error) -> &'static str {
    match e {
        object_store::path::Error::EmptySegment { .. } => "empty key segment",
        object_store::path::Error::BadSegment { .. } => "key segment the object store refuses",
        _ => "key the object store refuses",
    }
}
