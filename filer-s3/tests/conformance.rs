//! One behaviour, every backend: the same checks of the [`Filer`] contract
//! run against the local directory and against a real S3-compatible server
//! (moto, started on 127.0.0.1 by the test).
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use filer::{Filer, FilerError, FilerUrl, LocalFiler, ObjectPath};
use kelp_filer_s3::{S3Filer, S3Settings};
use test_support::{S3Server, S3_ACCESS_KEY_ID, S3_REGION, S3_SECRET_ACCESS_KEY};

/// More than one `ListObjectsV2` page (1000 keys) holds.
const PAGINATED_OBJECTS: usize = 1_003;
/// Writers racing to create one object.
const RACING_WRITERS: usize = 8;

fn p(path: &str) -> ObjectPath {
    ObjectPath::new(path).unwrap()
}

fn read_all(filer: &dyn Filer, path: &ObjectPath) -> Vec<u8> {
    let size = filer.size(path).unwrap();
    let mut buf = vec![0u8; size as usize];
    assert_eq!(filer.read_at(path, 0, &mut buf).unwrap(), buf.len());
    buf
}

fn s3_filer(server: &S3Server, prefix: &str) -> S3Filer {
    S3Filer::open(server.bucket(), prefix, &server.settings()).unwrap()
}

/// Every check, in order, on one empty filer; `scratch` is a local
/// directory for `put_file`'s source files.
fn conforms(filer: Arc<dyn Filer>, scratch: &std::path::Path) {
    put_read_and_size(filer.as_ref());
    create_never_overwrites(filer.as_ref());
    put_file_creates_and_hands_the_file_over(filer.as_ref(), scratch);
    listing_is_recursive_sorted_scoped_and_paginated(filer.as_ref());
    delete_removes_the_tree(filer.as_ref());
    racing_creates_have_one_winner(filer);
}

fn put_read_and_size(filer: &dyn Filer) {
    let a = p("rw/a");
    filer.put(&a, b"hello world").unwrap();
    assert_eq!(filer.size(&a).unwrap(), 11);
    assert_eq!(read_all(filer, &a), b"hello world");
    // Ranged reads: inside, cut short at the end, at and past the end.
    let mut buf = [0u8; 5];
    assert_eq!(filer.read_at(&a, 6, &mut buf).unwrap(), 5);
    assert_eq!(&buf, b"world");
    assert_eq!(filer.read_at(&a, 8, &mut buf).unwrap(), 3);
    assert_eq!(&buf[..3], b"rld");
    assert_eq!(filer.read_at(&a, 11, &mut buf).unwrap(), 0);
    assert_eq!(filer.read_at(&a, 1_000, &mut buf).unwrap(), 0);
    // Overwrite replaces the whole object.
    filer.put(&a, b"hi").unwrap();
    assert_eq!(read_all(filer, &a), b"hi");
    // Empty objects exist.
    let empty = p("rw/empty");
    filer.put(&empty, b"").unwrap();
    assert_eq!(filer.size(&empty).unwrap(), 0);
    assert_eq!(filer.read_at(&empty, 0, &mut buf).unwrap(), 0);
    // Absent objects are NotFound for every read.
    let absent = p("rw/absent");
    assert!(filer.size(&absent).unwrap_err().is_not_found());
    assert!(filer
        .read_at(&absent, 0, &mut buf)
        .unwrap_err()
        .is_not_found());
}

fn create_never_overwrites(filer: &dyn Filer) {
    let c = p("create/c");
    filer.create(&c, b"first").unwrap();
    let err = filer.create(&c, b"second").unwrap_err();
    assert!(matches!(err, FilerError::AlreadyExists { .. }), "{err}");
    assert_eq!(read_all(filer, &c), b"first");
    // put still replaces what create made.
    filer.put(&c, b"third").unwrap();
    assert_eq!(read_all(filer, &c), b"third");
}

fn put_file_creates_and_hands_the_file_over(filer: &dyn Filer, scratch: &std::path::Path) {
    let local = scratch.join("chunk-1");
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&local, &body).unwrap();
    let chunk = p("files/chunk-1");
    // Only the first `len` bytes are the object.
    filer.put_file(&chunk, &local, 200_000).unwrap();
    assert!(!local.exists(), "put_file left the local file");
    assert_eq!(read_all(filer, &chunk), &body[..200_000]);

    // Onto an existing object: refused, and the local file stays.
    let again = scratch.join("chunk-1-again");
    std::fs::write(&again, b"other bytes").unwrap();
    let err = filer.put_file(&chunk, &again, 11).unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert!(again.exists(), "a refused put_file took the file");
    assert_eq!(read_all(filer, &chunk), &body[..200_000]);

    // A file shorter than the length asked for is an error, not a short object.
    let short = scratch.join("short");
    std::fs::write(&short, b"abc").unwrap();
    let short_chunk = p("files/short");
    assert!(filer.put_file(&short_chunk, &short, 10).is_err());
    assert!(filer.size(&short_chunk).unwrap_err().is_not_found());
}

fn listing_is_recursive_sorted_scoped_and_paginated(filer: &dyn Filer) {
    for path in ["ls/b/2", "ls/a", "ls/b/1", "ls/c/d/e", "lsx/outside"] {
        filer.put(&p(path), path.as_bytes()).unwrap();
    }
    let listed: Vec<String> = filer
        .list(&p("ls"))
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(listed, ["ls/a", "ls/b/1", "ls/b/2", "ls/c/d/e"]);
    assert_eq!(filer.list_children(&p("ls")).unwrap(), ["a", "b", "c"]);
    assert!(filer.list(&p("nothing")).unwrap().is_empty());
    assert!(filer.list_children(&p("nothing")).unwrap().is_empty());

    for i in 0..PAGINATED_OBJECTS {
        filer.put(&p(&format!("many/{i:05}")), b"x").unwrap();
    }
    let many = filer.list(&p("many")).unwrap();
    assert_eq!(many.len(), PAGINATED_OBJECTS);
    assert!(many.windows(2).all(|w| w[0] < w[1]), "list is not sorted");
    assert_eq!(
        filer.list_children(&p("many")).unwrap().len(),
        PAGINATED_OBJECTS
    );
}

fn delete_removes_the_tree(filer: &dyn Filer) {
    filer.delete(&p("ls")).unwrap();
    assert!(filer.list(&p("ls")).unwrap().is_empty());
    assert!(filer.size(&p("ls")).unwrap_err().is_not_found());
    // A sibling sharing the name's first letters stays.
    assert_eq!(filer.list(&p("lsx")).unwrap(), [p("lsx/outside")]);
    filer.delete(&p("many")).unwrap();
    assert!(filer.list(&p("many")).unwrap().is_empty());
    // Deleting nothing is fine.
    filer.delete(&p("never/was")).unwrap();
}

fn racing_creates_have_one_winner(filer: Arc<dyn Filer>) {
    let target = p("race/seal");
    let writers: Vec<_> = (0..RACING_WRITERS)
        .map(|i| {
            let filer = filer.clone();
            let target = target.clone();
            std::thread::spawn(move || {
                filer
                    .create(&target, format!("writer {i}").as_bytes())
                    .map(|()| i)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for w in writers {
        match w.join().unwrap() {
            Ok(i) => winners.push(i),
            Err(e) => assert!(e.is_already_exists(), "{e}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        read_all(filer.as_ref(), &target),
        format!("writer {}", winners[0]).as_bytes()
    );
}

#[test]
fn local_filer_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let filer = Arc::new(LocalFiler::open(dir.path().join("filer")).unwrap());
    conforms(filer, dir.path());
}

#[test]
fn s3_filer_conforms() {
    let server = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let filer = Arc::new(s3_filer(&server, "conformance/run"));
    conforms(filer, dir.path());
    // Everything it stored is under its prefix in the bucket.
    let keys = server.keys("");
    assert!(!keys.is_empty());
    assert!(
        keys.iter().all(|k| k.starts_with("conformance/run/")),
        "{keys:?}"
    );
}

#[test]
fn two_prefixes_in_one_bucket_do_not_see_each_other() {
    let server = S3Server::start();
    let a = s3_filer(&server, "tenant-a");
    let b = s3_filer(&server, "tenant-b");
    a.put(&p("topics/t"), b"a").unwrap();
    b.put(&p("topics/t"), b"b").unwrap();
    assert_eq!(read_all(&a, &p("topics/t")), b"a");
    assert_eq!(a.list(&p("topics")).unwrap(), [p("topics/t")]);
    b.delete(&p("topics")).unwrap();
    assert_eq!(read_all(&a, &p("topics/t")), b"a");
}

#[test]
fn an_unreachable_store_is_an_error_not_a_hang_or_a_panic() {
    // A port nothing listens on (reserved, never bound).
    let port = test_support::free_port_pair();
    let filer = S3Filer::open(
        "kelp-absent",
        "",
        &S3Settings {
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            region: Some(S3_REGION.into()),
            allow_http: Some(true),
            access_key_id: Some(S3_ACCESS_KEY_ID.into()),
            secret_access_key: Some(S3_SECRET_ACCESS_KEY.into()),
            retry_timeout: Some(std::time::Duration::from_secs(1)),
        },
    )
    .unwrap();
    let err = filer.size(&p("x")).unwrap_err();
    assert!(
        matches!(err, FilerError::Remote { op: "head", .. }),
        "{err}"
    );
}

#[test]
fn filer_urls_name_the_backend() {
    assert!(matches!(
        FilerUrl::parse("s3://kelp-data/prod").unwrap(),
        FilerUrl::S3 { .. }
    ));
    assert!(matches!(
        FilerUrl::parse("file:///tmp/x").unwrap(),
        FilerUrl::Local(_)
    ));
}

#[test]
fn dropping_the_filer_inside_an_async_task_does_not_panic() {
    let server = S3Server::start();
    let filer = s3_filer(&server, "drop");
    filer.put(&p("x"), b"x").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async move { drop(filer) });
}
