#![forbid(unsafe_code)]
//! Host wiring shared by the Lambda functions and `flotilla serve`: logging set-up and the
//! construction of [`flotilla_services::AppState`] from configuration, once per process.

#[cfg(feature = "lambda-http")]
pub mod apigw;
pub mod aws;
#[cfg(feature = "local")]
pub mod local;
#[cfg(feature = "queue")]
pub mod queue;
pub mod telemetry;
#[cfg(feature = "worker")]
pub mod worker;
