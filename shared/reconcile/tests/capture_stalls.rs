//! Capture's object-store reads have bounded retries and a stall bound (issue 35, item 6b):
//! an object that trickles (a byte every so often, never finishing) fails each attempt at the
//! attempt timeout and is tried at most `1 + MAX_OBJECT_RETRIES` times, instead of minutes per
//! attempt retried ten times.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::spi::{SecretString, StorageCredential, VendedCredentials};
use flotilla_reconcile::capture::iceberg::{ReadError, read_object};
use flotilla_reconcile::capture::storage::{MAX_OBJECT_RETRIES, UpstreamFiles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCATION: &str = "s3://upstream-bucket/wh/sales/orders/metadata/v1.metadata.json";

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

/// A storage endpoint whose every answer states a megabyte and then trickles one byte each
/// 50 ms, never finishing; counts the requests it receives.
async fn trickling() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\nETag: \"e1\"\r\n\
                            Last-Modified: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                loop {
                    // The fixture's pace, not a synchronization: the client gives up first.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if sock.write_all(b"x").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), requests)
}

#[tokio::test]
async fn a_trickling_object_fails_each_attempt_and_is_retried_a_bounded_number_of_times() {
    let (endpoint, requests) = trickling().await;
    // The attempt bound of the policy (30 s by default), short here so the test is quick.
    let policy = HttpPolicy {
        request_timeout: Duration::from_millis(500),
        ..HttpPolicy::local()
    };
    let files = UpstreamFiles::new(Some(vended(&endpoint)), true).with_http_policy(policy);
    // A guard far longer than the shortened attempts take together (about a second): before
    // the fix the store kept object_store's own 30 s per attempt whatever the policy said.
    let r = tokio::time::timeout(Duration::from_secs(10), read_object(&files, LOCATION))
        .await
        .expect("the policy's attempt bound ends a trickling read");
    assert!(
        matches!(r, Err(ReadError::Unavailable { .. })),
        "{:?}",
        r.as_ref().map(Vec::len)
    );
    let n = requests.load(Ordering::SeqCst);
    assert!(
        (1..=1 + MAX_OBJECT_RETRIES).contains(&n),
        "{n} requests for one trickling object"
    );
}
