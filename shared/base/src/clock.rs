//! The service clock: Flotilla's one [`Clock`], defined in `flotilla-domain` so that every
//! crate (ParqDB and the catalog providers included) reads the same injectable time.

pub use flotilla_domain::clock::*;
