//! A committed redb transaction survives the process dying right after `transact` returns.
//!
//! The test re-runs its own binary as a child that commits and then aborts (no destructors,
//! no clean close), and the parent reopens the file.

use std::process::Command;

use flotilla_metastore::redb_store::RedbMetastore;
use flotilla_metastore::{Consistency, Key, Metastore, Op, Transaction};

const CHILD_ENV: &str = "FLOTILLA_METASTORE_CRASH_CHILD_DB";
const TEST_NAME: &str = "committed_transaction_survives_process_abort";

fn child(path: &str) -> ! {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(_) => std::process::exit(3),
    };
    let committed = runtime.block_on(async {
        let store = RedbMetastore::open(path).ok()?;
        let tx = Transaction::new()
            .with(Op::create(Key::new("crash", "a"), b"committed".to_vec()))
            .with(Op::create(Key::new("crash", "b"), b"committed".to_vec()));
        store.transact(tx).await.ok()?;
        store
            .transact(Transaction::new().with(Op::replace(
                Key::new("crash", "a"),
                1,
                b"second".to_vec(),
            )))
            .await
            .ok()
    });
    if committed.is_none() {
        std::process::exit(2);
    }
    std::process::abort();
}

#[test]
fn committed_transaction_survives_process_abort() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
    }
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("temp dir: {e}"),
    };
    let path = dir.path().join("crash.redb");
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => panic!("current exe: {e}"),
    };
    let status = Command::new(exe)
        .args([TEST_NAME, "--exact", "--nocapture"])
        .env(CHILD_ENV, &path)
        .status()
        .unwrap_or_else(|e| panic!("spawn child: {e}"));
    assert!(
        !status.success(),
        "the child must die by abort, not exit cleanly"
    );
    assert!(
        status.code().is_none_or(|c| c != 2 && c != 3),
        "the child failed before its commits: {status}"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = runtime.unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        let store =
            RedbMetastore::open(&path).unwrap_or_else(|e| panic!("reopen after crash: {e}"));
        let a = store
            .get(&Key::new("crash", "a"), Consistency::Strong)
            .await
            .ok()
            .flatten();
        let b = store
            .get(&Key::new("crash", "b"), Consistency::Strong)
            .await
            .ok()
            .flatten();
        assert_eq!(
            a.map(|i| (i.version, i.body)),
            Some((2, b"second".to_vec()))
        );
        assert_eq!(b.map(|i| i.version), Some(1));
    });
}
