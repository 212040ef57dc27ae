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

/// The STS endpoint of the standard SDK configuration (`AWS_ENDPOINT_URL_STS`, which
/// `scripts/test.sh` points at the moto server). Tests of the deployment's own AWS identity
/// load it the way a deployment does, with no Flotilla-specific switch.
///
/// # Panics
/// When the variable is not set: STS would be the real one, and the test must not pass.
pub fn sts_endpoint() -> String {
    match std::env::var("AWS_ENDPOINT_URL_STS") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "AWS_ENDPOINT_URL_STS is not set: run the tests through scripts/test.sh, which \
             points it at moto server, or export it yourself"
        ),
    }
}

/// A moto server of the test's own, for state that must not leak into other tests (IAM
/// enforcement is server-wide). Started from `FLOTILLA_MOTO_SERVER` (the `moto_server`
/// executable `scripts/test.sh` installs) on a free loopback port; killed on drop.
pub struct PrivateMoto {
    child: std::process::Child,
    endpoint: String,
}

impl PrivateMoto {
    /// Starts the server and waits until it answers (bounded: 30 s of polling).
    ///
    /// # Panics
    /// When `FLOTILLA_MOTO_SERVER` is not set or the server does not come up.
    pub async fn start() -> Self {
        let bin = match std::env::var("FLOTILLA_MOTO_SERVER") {
            Ok(v) if !v.is_empty() => v,
            _ => panic!(
                "FLOTILLA_MOTO_SERVER is not set: run the tests through scripts/test.sh, \
                 which exports the moto_server path, or export it yourself"
            ),
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = std::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start moto_server");
        let endpoint = format!("http://127.0.0.1:{port}");
        let me = Self { child, endpoint };
        let http = reqwest::Client::new();
        for _ in 0..300 {
            if http
                .get(format!("{}/moto-api/", me.endpoint))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return me;
            }
            // Readiness polling of a child process, not synchronization between tasks.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the private moto server did not come up");
    }

    /// Its base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Enforces IAM on every request after the next `unauthenticated` ones (moto's
    /// `/moto-api/reset-auth`).
    pub async fn enforce_iam_after(&self, unauthenticated: u32) {
        let r = reqwest::Client::new()
            .post(format!("{}/moto-api/reset-auth", self.endpoint))
            .header("content-type", "text/plain")
            .body(unauthenticated.to_string())
            .send()
            .await
            .expect("reset-auth");
        assert!(
            r.status().is_success(),
            "reset-auth answered {}",
            r.status()
        );
    }
}

impl Drop for PrivateMoto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
