//! The object-store transport under the address policy (`docs/reliability.md`, "Capture
//! honours the address policy"): a store whose connector is a [`PolicyConnector`] contacts
//! only what an upstream catalog call could, whatever URL the store builds, even when the
//! caller skipped the up-front endpoint check. Every forbidden target is a real listener
//! that counts the connections it accepts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flotilla_catalog_access::http::HttpPolicy;
use flotilla_catalog_access::object_storage::{PolicyConnector, check_endpoint, refusal};
use object_store::ObjectStoreExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A listener that counts accepted connections and answers each with `answer`.
async fn listener(bind: &str, answer: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind(bind).await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = l.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
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
    (addr, hits)
}

const OBJECT: &str = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\n\
    Last-Modified: Thu, 01 Jan 2026 00:00:00 GMT\r\nConnection: close\r\n\r\nhello";

fn store(endpoint: &str, policy: HttpPolicy) -> Arc<dyn object_store::ObjectStore> {
    Arc::new(
        AmazonS3Builder::new()
            .with_bucket_name("bucket")
            .with_region("us-east-1")
            .with_access_key_id("AKIAOBJECTSTORETEST1")
            .with_secret_access_key("secret")
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_http_connector(PolicyConnector::new(policy))
            .build()
            .expect("store"),
    )
}

#[tokio::test]
async fn a_literal_forbidden_endpoint_is_refused_by_the_transport_itself() {
    // The up-front check refuses it ...
    let (addr, hits) = listener("0.0.0.0:0", OBJECT).await;
    let endpoint = format!("http://0.0.0.0:{}", addr.port());
    let e = check_endpoint(&HttpPolicy::local(), &endpoint).expect_err("0.0.0.0");
    assert!(e.reason().contains("unspecified"), "{e}");
    // ... and a store built without it never connects either, in insecure mode too.
    let s = store(&endpoint, HttpPolicy::local());
    let err = s
        .get(&Path::from("k"))
        .await
        .expect_err("refused transport");
    let refused = refusal(&err).unwrap_or_else(|| panic!("not a policy refusal: {err}"));
    assert!(refused.reason().contains("never contacted"), "{refused}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a request reached 0.0.0.0");
}

#[tokio::test]
async fn loopback_and_plain_http_need_the_insecure_policy() {
    let (addr, hits) = listener("127.0.0.1:0", OBJECT).await;
    let endpoint = format!("http://{addr}");
    let strict = store(&endpoint, HttpPolicy::default());
    let err = strict.get(&Path::from("k")).await.expect_err("strict");
    assert!(refusal(&err).is_some(), "not a policy refusal: {err}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    let insecure = store(&endpoint, HttpPolicy::local());
    let got = insecure.get(&Path::from("k")).await.expect("insecure read");
    assert_eq!(&got.bytes().await.expect("body")[..], b"hello");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_not_followed_nor_retried() {
    let (forbidden, forbidden_hits) = listener("0.0.0.0:0", OBJECT).await;
    let redirect: &'static str = Box::leak(
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://0.0.0.0:{}/k\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            forbidden.port()
        )
        .into_boxed_str(),
    );
    let (addr, hits) = listener("127.0.0.1:0", redirect).await;
    let s = store(&format!("http://{addr}"), HttpPolicy::local());
    let err = s.get(&Path::from("k")).await.expect_err("redirect");
    assert!(refusal(&err).is_some(), "not a policy refusal: {err}");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "a refusal is not retried");
    assert_eq!(forbidden_hits.load(Ordering::SeqCst), 0);
}
