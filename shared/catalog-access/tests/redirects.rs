//! Redirects and the address policy, against two raw HTTP origins on loopback: a token
//! request never follows a redirect (its body carries the client secret), idempotent reads
//! still do, and policy refusals are permanent configuration errors.

use std::sync::{Arc, Mutex};

use flotilla_catalog_access::CatalogAccessError;
use flotilla_catalog_access::http::{HttpClient, HttpPolicy, RetryMode, RetryPolicy};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use url::Url;

const SECRET: &str = "client-secret-canary-7f3a";

/// A loopback origin that records every request it receives (head and body) and answers each
/// with `answer`.
struct Origin {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

async fn origin(answer: String) -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head, then as much body as Content-Length announces.
                loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                log.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).to_string());
                let _ = sock.write_all(answer.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Origin { url, seen }
}

fn redirect_to(location: &str, status: u16) -> String {
    format!(
        "HTTP/1.1 {status} Redirect\r\nLocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
}

const OK: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";

fn client() -> HttpClient {
    HttpClient::new(HttpPolicy {
        retry: RetryPolicy::none(),
        ..HttpPolicy::local()
    })
    .unwrap()
}

fn token_request(client: &HttpClient, url: &str) -> reqwest::Request {
    client
        .request(Method::POST, Url::parse(url).unwrap())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "grant_type=client_credentials&client_id=c&client_secret={SECRET}"
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn token_requests_never_follow_a_cross_origin_redirect() {
    let other = origin(OK.to_owned()).await;
    for status in [307, 308, 302, 301] {
        let first = origin(redirect_to(&format!("{}/steal", other.url), status)).await;
        let c = client();
        let err = c
            .execute(
                token_request(&c, &format!("{}/oauth/tokens", first.url)),
                RetryMode::Once,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, CatalogAccessError::Config(t) if t.as_str().contains("redirect")),
            "{status}: {err:?}"
        );
        assert!(!err.is_retryable(), "{status}");
        assert!(!err.to_string().contains(SECRET));
        assert_eq!(first.seen.lock().unwrap().len(), 1, "{status}");
    }
    assert!(
        other.seen.lock().unwrap().is_empty(),
        "the other origin received: {:?}",
        other.seen.lock().unwrap()
    );
}

#[tokio::test]
async fn idempotent_reads_still_follow_allowed_redirects() {
    let other = origin(OK.to_owned()).await;
    let first = origin(redirect_to(&format!("{}/moved", other.url), 307)).await;
    let c = client();
    let req = c
        .request(
            Method::GET,
            Url::parse(&format!("{}/v1/config", first.url)).unwrap(),
        )
        .build()
        .unwrap();
    let resp = c.execute(req, RetryMode::IdempotentRead).await.unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(other.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_redirect_to_a_forbidden_address_is_a_permanent_refusal() {
    let first = origin(redirect_to("http://[::169.254.169.254]/latest/", 302)).await;
    let c = client();
    let req = c
        .request(Method::GET, Url::parse(&first.url).unwrap())
        .build()
        .unwrap();
    let err = c.execute(req, RetryMode::IdempotentRead).await.unwrap_err();
    assert!(
        matches!(&err, CatalogAccessError::Config(t) if t.as_str().contains("refused by address policy")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}
