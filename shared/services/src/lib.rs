#![forbid(unsafe_code)]
//! Flotilla's resource services: the application state every host builds once
//! ([`AppState`], [`Config`]), authentication, the protocols behind the HTTP routes
//! (`service`) and upstream access (`access`: connecting integrations, the session cache,
//! validation and upstream listings).

#[cfg(feature = "upstream")]
pub mod access;
pub mod acl;
pub mod auth;
pub mod refusal_limit;
pub mod service;
#[cfg(feature = "upstream")]
pub mod sessions;
pub mod signing;
pub mod state;
pub mod token_limit;

pub use flotilla_base::{clock, error};
pub use state::{AppState, Config};
