//! Capture honours the upstream address policy (`docs/reliability.md`, "Capture honours the
//! address policy"): the storage an upstream vends for a table (its `s3.endpoint`, where
//! that endpoint's name resolves, where its answers redirect) is contacted only where an
//! upstream catalog call could go. Link-local and metadata addresses never; loopback,
//! private ranges and plain http only in insecure mode (`--allow-insecure-upstreams`).
//!
//! Every forbidden target here is a real listener that counts the connections it accepts,
//! so "refused" means "no byte left the process", not "an error came back eventually".

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::spi::{SecretString, StorageCredential, VendedCredentials};
use flotilla_reconcile::capture::iceberg::{ReadError, read_object};
use flotilla_reconcile::capture::storage::{StorageError, UpstreamFiles};
use object_store::ObjectStoreExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCATION: &str = "s3://upstream-bucket/wh/sales/orders/metadata/v1.metadata.json";

/// A raw HTTP origin that counts accepted connections and answers every request with
/// `answer`.
struct Origin {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Origin {
    async fn start(bind: &str, answer: String) -> Self {
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = sock.write_all(answer.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Self { addr, hits }
    }

    /// An S3-like answer to a GET: five bytes with the headers object_store reads.
    async fn object(bind: &str) -> Self {
        Self::start(
            bind,
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\n\
             Last-Modified: Thu, 01 Jan 2026 00:00:00 GMT\r\nConnection: close\r\n\r\nhello"
                .to_owned(),
        )
        .await
    }

    /// Answers every request with a redirect to `target`.
    async fn redirecting(bind: &str, target: &str) -> Self {
        Self::start(
            bind,
            format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            ),
        )
        .await
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn vended(endpoint: &str) -> VendedCredentials {
    VendedCredentials {
        prefix: None,
        credential: StorageCredential::S3 {
            access_key_id: SecretString::new("AKIAUPSTREAMVENDED01"),
            secret_access_key: SecretString::new("upstream-vended-secret"),
            session_token: Some(SecretString::new("upstream-vended-token")),
        },
        expires_at: None,
        settings: BTreeMap::from([
            ("s3.endpoint".to_owned(), endpoint.to_owned()),
            ("s3.region".to_owned(), "us-east-1".to_owned()),
        ]),
    }
}

/// Reads the table's metadata object through what the upstream vends; answers the error
/// text, or `read N bytes`.
async fn read(files: &UpstreamFiles) -> Result<usize, ReadError> {
    read_object(files, LOCATION).await.map(|b| b.len())
}

fn assert_refused(r: &Result<usize, ReadError>, what: &str) {
    match r {
        Err(ReadError::Storage(StorageError::NotReadable(m))) => {
            assert!(m.contains("refused by address policy"), "{what}: {m}");
        }
        other => panic!("{what}: not refused by the address policy: {other:?}"),
    }
}

#[tokio::test]
async fn a_vended_metadata_or_link_local_endpoint_is_refused_in_every_mode() {
    for insecure in [false, true] {
        for endpoint in [
            "http://169.254.169.254/",
            "https://169.254.169.254/latest/meta-data/",
            "http://169.254.1.1:9000/",
            "http://[fd00:ec2::254]/",
            "http://[::ffff:169.254.169.254]/",
            "http://100.100.100.200/",
            "http://[fe80::1]:9000/",
            "http://0.0.0.0:9000/",
            "http://[::]:9000/",
        ] {
            let files = UpstreamFiles::new(Some(vended(endpoint)), insecure);
            // Refused when the store is opened: nothing is built, nothing connects.
            match files.locate(LOCATION) {
                Err(StorageError::NotReadable(m)) => {
                    assert!(
                        m.contains("S3 endpoint") && m.contains("refused by address policy"),
                        "{endpoint}: {m}"
                    );
                }
                Err(e) => panic!("{endpoint}: {e}"),
                Ok(_) => panic!("{endpoint} (insecure: {insecure}): a store was opened"),
            }
        }
    }
}

#[tokio::test]
async fn an_unspecified_endpoint_reaches_no_listener() {
    // On Linux a connection to 0.0.0.0 reaches a listener on any local address: the
    // validation refuses it, and so must capture.
    let target = Origin::object("0.0.0.0:0").await;
    let port = target.addr.port();
    for insecure in [false, true] {
        let files = UpstreamFiles::new(Some(vended(&format!("http://0.0.0.0:{port}"))), insecure);
        let r = read(&files).await;
        assert_refused(&r, "0.0.0.0");
    }
    assert_eq!(
        target.hits(),
        0,
        "a request reached the listener on 0.0.0.0"
    );
}

#[tokio::test]
async fn plain_http_and_private_endpoints_need_the_insecure_flag() {
    // Strict: plain http is refused before anything connects, whatever the host.
    let files = UpstreamFiles::new(Some(vended("http://s3.example.com")), false);
    assert!(
        matches!(files.locate(LOCATION), Err(StorageError::NotReadable(m)) if m.contains("plain http")),
        "plain http allowed without the insecure flag"
    );
    let origin = Origin::object("127.0.0.1:0").await;
    let endpoint = format!("http://{}", origin.addr);
    for literal in [endpoint.clone(), "https://10.0.0.7:9000".to_owned()] {
        let files = UpstreamFiles::new(Some(vended(&literal)), false);
        assert!(
            matches!(files.locate(LOCATION), Err(StorageError::NotReadable(m)) if m.contains("refused by address policy")),
            "{literal} allowed without the insecure flag"
        );
    }
    assert_eq!(origin.hits(), 0);

    // Insecure (local development, loopback fixtures): the same endpoint is read, through
    // the policy's own transport.
    let files = UpstreamFiles::new(Some(vended(&endpoint)), true);
    assert_eq!(read(&files).await.expect("read in insecure mode"), 5);
    assert_eq!(origin.hits(), 1);
}

#[tokio::test]
async fn a_name_resolving_to_a_refused_address_is_refused_after_resolution() {
    // `localhost` resolves (through the system resolver) to loopback: allowed only in
    // insecure mode, so a strict host never connects to the listener behind it.
    let origin = Origin::object("127.0.0.1:0").await;
    let port = origin.addr.port();
    let files = UpstreamFiles::new(Some(vended(&format!("https://localhost:{port}"))), false);
    assert!(
        files.locate(LOCATION).is_ok(),
        "a named host is checked when resolved"
    );
    let r = read(&files).await;
    assert_refused(&r, "localhost, strict");
    if let Err(ReadError::Storage(StorageError::NotReadable(m))) = &r {
        // Never what the name resolved to (no internal-DNS oracle).
        assert!(!m.contains("127.0.0.1") && !m.contains("loopback"), "{m}");
    }
    assert_eq!(origin.hits(), 0, "the strict host connected to loopback");

    // A name whose DNS answer is the metadata address is refused even in insecure mode.
    let policy = HttpPolicy {
        static_hosts: BTreeMap::from([(
            "s3.rebound.test".to_owned(),
            vec!["169.254.169.254".parse::<IpAddr>().expect("ip")],
        )]),
        ..HttpPolicy::local()
    };
    let files = UpstreamFiles::new(Some(vended("http://s3.rebound.test:9000")), true)
        .with_http_policy(policy);
    assert_refused(&read(&files).await, "metadata by DNS, insecure");
}

#[tokio::test]
async fn a_redirect_from_an_allowed_endpoint_to_a_forbidden_address_is_not_followed() {
    let forbidden = Origin::object("0.0.0.0:0").await;
    for target in [
        format!("http://0.0.0.0:{}/latest/meta-data/", forbidden.addr.port()),
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/".to_owned(),
        "http://[fd00:ec2::254]/latest/meta-data/".to_owned(),
    ] {
        let origin = Origin::redirecting("127.0.0.1:0", &target).await;
        let files = UpstreamFiles::new(Some(vended(&format!("http://{}", origin.addr))), true);
        let r = read(&files).await;
        assert_refused(&r, &target);
        assert_eq!(origin.hits(), 1, "{target}: refusals are not retried");
        // Footer reads (ranged GETs of data files) are refused the same way, as a file error.
        let at = files.locate(LOCATION).expect("locate");
        let e = at
            .store
            .get_range(&at.path, 0..4)
            .await
            .expect_err("redirected");
        assert!(
            flotilla_catalog_access::object_storage::refusal(&e).is_some(),
            "{target}: {e}"
        );
    }
    assert_eq!(forbidden.hits(), 0, "the redirect reached 0.0.0.0");
}

#[tokio::test]
async fn a_vended_region_that_is_not_a_region_name_is_refused() {
    // The region becomes part of the default endpoint's host name
    // (`s3.<region>.amazonaws.com`): one that smuggles in a user part or a path would move
    // the host somewhere else.
    for region in ["x@169.254.169.254#", "us-east-1.evil.example/", "us east 1"] {
        let mut v = vended("https://s3.example.com");
        v.settings.remove("s3.endpoint");
        v.settings.insert("s3.region".to_owned(), region.to_owned());
        let files = UpstreamFiles::new(Some(v), true);
        assert!(
            matches!(files.locate(LOCATION), Err(StorageError::NotReadable(m)) if m.contains("region")),
            "{region:?} accepted"
        );
    }
}
