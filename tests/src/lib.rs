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
