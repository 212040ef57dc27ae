//! The services' error, re-exported from `flotilla-error` for every crate of the stack.
//!
//! A service returns [`ApiResult`]; foreign errors convert with `?` through the `From` impl
//! next to their own type. How an error answers over HTTP (status, body, `Retry-After`) is
//! decided only in `flotilla-http`.

pub use flotilla_error::{Error, ErrorKind, Result};

/// The result of a service operation.
pub type ApiResult<T> = flotilla_error::Result<T>;
