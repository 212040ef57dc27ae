//! The services' error, re-exported from `flotilla-error` for every crate of the stack.
//!
//! A service returns [`Result`] (`flotilla_error::Result`); foreign errors convert with `?`
//! through the `From` impl next to their own type. How an error answers over HTTP (status,
//! body, `Retry-After`) is decided only in `flotilla-http`.

pub use flotilla_error::{Error, ErrorKind, Result};
