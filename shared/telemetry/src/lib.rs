#![forbid(unsafe_code)]
//! Telemetry shared by every Flotilla process: the metric catalogue ([`catalog`]) with its
//! two renderings ([`prometheus`] for `/v1/admin/metrics`, [`emf`] for CloudWatch on
//! Lambda), the process-wide [`registry`], trace-context propagation ([`trace`]) and the flat
//! JSON log format of the Lambda functions ([`logs`]). `docs/operations.md` describes what an
//! operator sees.

pub mod catalog;
pub mod emf;
pub mod logs;
pub mod prometheus;
pub mod registry;
pub mod trace;

pub use registry::{Global, Only, Sample, Source, Value, global, intern_route, status_class};
