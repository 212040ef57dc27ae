#![forbid(unsafe_code)]
//! Flotilla's domain: identifier rules, storage keys and stored resource records.

pub mod clock;
pub mod keys;
pub mod model;
pub mod names;
pub mod selection;

mod error_kind;
