//! The metastore contract on the embedded redb backend.

#[macro_use]
mod common;

use flotilla_metastore::redb_store::RedbMetastore;

async fn in_memory() -> Box<RedbMetastore> {
    match RedbMetastore::in_memory() {
        Ok(store) => Box::new(store),
        Err(e) => panic!("cannot open in-memory redb: {e}"),
    }
}

async fn on_disk() -> Box<RedbMetastore> {
    // The directory is leaked on purpose: it must outlive the store, and the OS temp dir is
    // cleaned independently of the test.
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir.keep(),
        Err(e) => panic!("cannot create temp dir: {e}"),
    };
    match RedbMetastore::open(dir.join("metastore.redb")) {
        Ok(store) => Box::new(store),
        Err(e) => panic!("cannot open redb file: {e}"),
    }
}

mod memory {
    use super::*;
    contract_tests!(in_memory);
}

mod file {
    use super::*;
    contract_tests!(on_disk);
}
