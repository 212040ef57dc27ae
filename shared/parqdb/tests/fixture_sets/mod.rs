//! Where the ParqDB metadata fixtures live.
//!
//! The project's own set (`shared/parqdb/fixtures/v1`, written by `fixtures/generate.py`
//! from the format rules in docs/parqdb.md) is always used. An external conformance set with
//! the same layout (`valid/`, `invalid/manifest.json`, `catalog.json`) runs as an extra when
//! `FLOTILLA_PARQDB_CONFORMANCE_DIR` names its directory.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The project's own fixture set.
pub fn own() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/v1"))
}

/// The external conformance set, when `FLOTILLA_PARQDB_CONFORMANCE_DIR` names one. A name
/// that is set but holds no fixture set is an error, never a silent skip.
pub fn conformance() -> Option<PathBuf> {
    let dir = std::env::var_os("FLOTILLA_PARQDB_CONFORMANCE_DIR").filter(|d| !d.is_empty())?;
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("catalog.json").is_file(),
        "FLOTILLA_PARQDB_CONFORMANCE_DIR={} holds no catalog.json",
        dir.display()
    );
    Some(dir)
}

/// Every fixture set to check: the project's own, then the conformance set if named.
pub fn all() -> Vec<PathBuf> {
    std::iter::once(own()).chain(conformance()).collect()
}

pub fn read(dir: &Path, rel: &str) -> Vec<u8> {
    let path = dir.join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()))
}

/// Every `.json` file below `dir/sub`, sorted.
pub fn json_files(dir: &Path, sub: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join(sub)];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}
