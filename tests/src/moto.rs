//! Where the AWS emulator (moto server) is.
//!
//! The test script (`scripts/test.sh`) starts one `moto_server` on a free loopback port and
//! exports `FLOTILLA_MOTO_ENDPOINT`. Tests that need AWS call [`endpoint`]; without the
//! variable they fail loudly rather than pass without having tested anything.

/// The emulator's base URL, e.g. `http://127.0.0.1:5055`.
///
/// # Panics
/// When `FLOTILLA_MOTO_ENDPOINT` is not set: such a test cannot run and must not pass.
pub fn endpoint() -> String {
    match std::env::var("FLOTILLA_MOTO_ENDPOINT") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "FLOTILLA_MOTO_ENDPOINT is not set: run the tests through scripts/test.sh, \
             which starts moto server, or export it yourself"
        ),
    }
}

/// The single-threaded emulator's base URL (`FLOTILLA_MOTO_SERIAL_ENDPOINT`): moto's app
/// under a server that answers one request at a time (`scripts/moto_serial.py`), for races
/// whose outcome depends on transactions being isolated from each other, which the threaded
/// server does not guarantee.
///
/// # Panics
/// When the variable is not set, like [`endpoint`].
pub fn serial_endpoint() -> String {
    match std::env::var("FLOTILLA_MOTO_SERIAL_ENDPOINT") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "FLOTILLA_MOTO_SERIAL_ENDPOINT is not set: run the tests through scripts/test.sh, \
             which starts the single-threaded moto (scripts/moto_serial.py), or export it"
        ),
    }
}

/// The static credentials and region every AWS client uses against moto. Build SDK
/// configs with these explicitly (edition 2024 makes `std::env::set_var` unsafe).
pub const TEST_ACCESS_KEY_ID: &str = "test";
pub const TEST_SECRET_ACCESS_KEY: &str = "test";
pub const TEST_REGION: &str = "us-east-1";

/// A name unique to this process and call, for tables, queues and secrets in moto (whose
/// state is shared by every test of a run).
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}
