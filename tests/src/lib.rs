#![forbid(unsafe_code)]
//! Test support for Flotilla: the moto emulator endpoint, fixture upstream catalog servers
//! (Iceberg REST, Unity Catalog, Delta Sharing) that record the requests they answered, and
//! shared helpers. End-to-end tests live in `tests/tests/`.

pub mod delta_files;
pub mod delta_sharing_fixture;
pub mod fixture;
pub mod iceberg_files;
pub mod iceberg_fixture;
pub mod moto;
/// The request log, at its historical path (it lives in [`fixture::recorder`]).
pub use fixture::recorder;
pub mod unity_fixture;

/// The upstream files root of test hosts whose fixture upstreams keep their table files in
/// temporary directories (`flotilla serve --upstream-files-root`): the system temporary
/// directory, canonicalized.
pub fn upstream_files_root() -> std::path::PathBuf {
    std::env::temp_dir()
        .canonicalize()
        .unwrap_or_else(|_| std::env::temp_dir())
}
