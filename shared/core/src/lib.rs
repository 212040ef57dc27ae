#![forbid(unsafe_code)]
//! Flotilla's core as one facade: it re-exports the crates the service stack is split into
//! (`flotilla-base`, `-directory`, `-services`, `-reconcile`, `-http`) under the module
//! names they had when they were one crate, and holds the fuzzing entry points, which reach
//! into all of them (feature `fuzzing`: the cargo-fuzz targets and the fuzz smoke tests).
//! New code depends on the specific crate it uses (docs/architecture.md).

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

pub use flotilla_base::{clock, error};
pub use flotilla_http as http;
pub use flotilla_reconcile as reconcile;
pub use flotilla_services::{access, acl, auth, service, state};

/// The catalog directory: the replica and its generation (`flotilla_directory`) and the
/// operations that need the application state (`flotilla_services::service::directory`).
pub mod directory {
    pub use flotilla_directory::*;
    pub use flotilla_services::service::directory::{finalize, get};
}

pub use http::router;
pub use state::{AppState, Config};
