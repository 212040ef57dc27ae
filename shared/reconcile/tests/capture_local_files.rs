//! Insecure mode never turns capture into a local file reader (issue 35, item 5): `file://`
//! locations an upstream names (metadata, manifests, data files, Delta logs) are read only
//! below the operator's `--upstream-files-root`, through the hardened reader (regular files,
//! no symlink anywhere, no blocking open, a deadline), and refused permanently otherwise,
//! with `--allow-insecure-upstreams` or without.

use std::path::Path;
use std::time::Duration;

use flotilla_reconcile::capture::delta::log::tip;
use flotilla_reconcile::capture::iceberg::{ReadError, read_object};
use flotilla_reconcile::capture::storage::{StorageError, UpstreamFiles};

/// A guard against a read that parks its task (a FIFO opened blocking): far longer than any
/// answer takes, and no part of the behaviour under test.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

const SECRET: &[u8] = b"metastore-secret-bytes";

fn url(path: &Path) -> String {
    format!("file://{}", path.display())
}

async fn read(files: &UpstreamFiles, location: &str) -> Result<Vec<u8>, ReadError> {
    tokio::time::timeout(ANSWER_WITHIN, read_object(files, location))
        .await
        .expect("a local read answers without waiting on the file")
}

fn assert_not_readable(r: &Result<Vec<u8>, ReadError>, needle: &str, what: &str) {
    match r {
        Err(ReadError::Storage(StorageError::NotReadable(m))) => {
            assert!(m.contains(needle), "{what}: {m}");
        }
        other => panic!("{what}: not refused as not readable: {other:?}"),
    }
}

/// A host layout: the upstream files root, and beside it what an upstream must never reach
/// (a stand-in for the metastore and another tenant's metadata).
struct Layout {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("upstream");
    let outside = base.join("data");
    std::fs::create_dir_all(root.join("t/metadata")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("metastore.redb"), SECRET).unwrap();
    std::fs::write(root.join("t/metadata/v1.metadata.json"), b"{\"ok\": 1}").unwrap();
    Layout {
        _dir: dir,
        root,
        outside,
    }
}

#[tokio::test]
async fn without_a_root_no_local_file_is_read_even_in_insecure_mode() {
    let l = layout();
    for insecure in [false, true] {
        // A root without the insecure flag allows nothing either.
        let files =
            UpstreamFiles::new(None, insecure).with_local_root((!insecure).then(|| l.root.clone()));
        for location in [
            "file:///etc/passwd".to_owned(),
            "file:///proc/self/environ".to_owned(),
            url(&l.outside.join("metastore.redb")),
            url(&l.root.join("t/metadata/v1.metadata.json")),
        ] {
            let r = read(&files, &location).await;
            assert_not_readable(&r, "--upstream-files-root", &location);
        }
        let r = tip(&files, &url(&l.root.join("t"))).await;
        assert!(
            matches!(r, Err(ReadError::Storage(StorageError::NotReadable(_)))),
            "{:?}",
            r.err()
        );
    }
}

#[tokio::test]
async fn with_a_root_only_regular_files_below_it_are_read() {
    let l = layout();
    let files = UpstreamFiles::new(None, true).with_local_root(Some(l.root.clone()));
    let ok = read(&files, &url(&l.root.join("t/metadata/v1.metadata.json"))).await;
    assert_eq!(ok.unwrap(), b"{\"ok\": 1}");

    // Outside the root, however it is spelt: not readable, naming the reason.
    for location in [
        "file:///etc/passwd".to_owned(),
        "file:///proc/self/environ".to_owned(),
        url(&l.outside.join("metastore.redb")),
        format!("file://{}/../data/metastore.redb", l.root.display()),
        format!("file://{}/t/../../data/metastore.redb", l.root.display()),
        url(&l.root),
    ] {
        let r = read(&files, &location).await;
        assert_not_readable(&r, "outside the directory", &location);
    }

    // Inside the root but leading out of it, or not a regular file: refused (as missing),
    // never read, never waited on.
    let meta = l.root.join("t/metadata");
    std::os::unix::fs::symlink(l.outside.join("metastore.redb"), meta.join("link.json")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", meta.join("passwd.json")).unwrap();
    std::os::unix::fs::symlink(&l.outside, l.root.join("t/out")).unwrap();
    let fifo = meta.join("fifo.json");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for location in [
        url(&meta.join("link.json")),
        url(&meta.join("passwd.json")),
        url(&l.root.join("t/out/metastore.redb")),
        url(&fifo),
        url(&meta),
    ] {
        match read(&files, &location).await {
            Err(ReadError::Corrupt { message, .. }) => {
                assert!(message.contains("does not exist"), "{location}: {message}");
            }
            other => panic!("{location}: {other:?}"),
        }
    }
    // A ranged read (a data file's footer) goes through the same reader.
    let at = files.locate(&url(&meta.join("link.json"))).unwrap();
    let got = object_store::ObjectStoreExt::get_range(at.store.as_ref(), &at.path, 0..4).await;
    assert!(
        matches!(got, Err(object_store::Error::NotFound { .. })),
        "{got:?}"
    );
    // The store writes nothing.
    let put = object_store::ObjectStoreExt::put(
        at.store.as_ref(),
        &object_store::path::Path::from_absolute_path(meta.join("new.json")).unwrap(),
        b"x".to_vec().into(),
    )
    .await;
    assert!(put.is_err());
    assert!(!meta.join("new.json").exists());
}

#[tokio::test]
async fn delta_logs_are_read_below_the_root_only() {
    let l = layout();
    let commit = b"{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":2}}\n";
    for table in [l.root.join("d"), l.outside.join("d")] {
        std::fs::create_dir_all(table.join("_delta_log")).unwrap();
        std::fs::write(table.join("_delta_log/00000000000000000000.json"), commit).unwrap();
    }
    let files = UpstreamFiles::new(None, true).with_local_root(Some(l.root.clone()));
    let t = tip(&files, &url(&l.root.join("d"))).await.expect("inside");
    assert_eq!(t.version, 0);
    // Another table outside the root (another tenant's files), also through `..`.
    for location in [
        url(&l.outside.join("d")),
        format!("file://{}/../data/d", l.root.display()),
    ] {
        let r = tip(&files, &location).await;
        assert!(
            matches!(r, Err(ReadError::Storage(StorageError::NotReadable(_)))),
            "{location}: {:?}",
            r.err()
        );
    }
    // A log directory that is a symlink out of the root lists nothing.
    std::fs::create_dir_all(l.root.join("linked")).unwrap();
    std::os::unix::fs::symlink(
        l.outside.join("d/_delta_log"),
        l.root.join("linked/_delta_log"),
    )
    .unwrap();
    let r = tip(&files, &url(&l.root.join("linked"))).await;
    assert!(
        matches!(&r, Err(ReadError::Corrupt { message, .. }) if message.contains("no Delta log")),
        "{:?}",
        r.err()
    );
    // A commit file that is a symlink out of the root is skipped by the listing.
    std::fs::create_dir_all(l.root.join("e/_delta_log")).unwrap();
    std::os::unix::fs::symlink(
        l.outside.join("d/_delta_log/00000000000000000000.json"),
        l.root.join("e/_delta_log/00000000000000000000.json"),
    )
    .unwrap();
    let r = tip(&files, &url(&l.root.join("e"))).await;
    assert!(
        matches!(&r, Err(ReadError::Corrupt { message, .. }) if message.contains("no commit")),
        "{:?}",
        r.err()
    );
}
