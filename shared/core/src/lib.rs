#![forbid(unsafe_code)]
//! Flotilla's core: the resource services (the protocols of the durability contract) and
//! the one HTTP router every host serves.

pub mod access;
pub mod auth;
pub mod clock;
pub mod directory;
pub mod error;
pub mod fuzzing;
pub mod http;
pub mod reconcile;
pub mod service;
pub mod state;

pub use http::router;
pub use state::{AppState, Config};
