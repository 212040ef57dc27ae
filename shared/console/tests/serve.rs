//! The console's routes and the safety rules of its source:
//!
//! - every response (page, assets, redirect, unknown asset) carries the strict
//!   Content-Security-Policy, `nosniff`, and refuses framing;
//! - every file under `assets/` is served, with its content type, and nothing else is;
//! - the page has no inline script or style, and the scripts use no HTML-parsing sink
//!   (`innerHTML`, `outerHTML`, `insertAdjacentHTML`, `document.write`, `eval`, ...), so an
//!   upstream-provided string can only ever become text;
//! - the token is kept in `sessionStorage` only (no `localStorage`, no cookie).

use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

fn app() -> Router {
    flotilla_console::routes()
}

async fn get(path: &str) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let resp = app()
        .oneshot(Request::get(path).body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    (status, headers, body)
}

fn assets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

fn files(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read assets") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, out);
        } else {
            let rel = path.strip_prefix(assets_dir()).expect("relative");
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn all_assets() -> Vec<String> {
    let mut out = Vec::new();
    files(&assets_dir(), &mut out);
    out.sort();
    out
}

fn assert_secure(h: &axum::http::HeaderMap, what: &str) {
    let csp = h
        .get(header::CONTENT_SECURITY_POLICY)
        .unwrap_or_else(|| panic!("{what}: no CSP"))
        .to_str()
        .expect("ascii");
    assert_eq!(csp, flotilla_console::CONTENT_SECURITY_POLICY, "{what}");
    for needle in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ] {
        assert!(csp.contains(needle), "{what}: CSP lacks {needle}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{what}"
    );
    assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
    assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{what}");
}

#[tokio::test]
async fn the_page_redirect_and_assets_carry_the_security_headers() {
    let page = std::fs::read(assets_dir().join("index.html")).expect("index.html");
    for path in ["/console/index.html", "/console/"] {
        let (status, h, body) = get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        assert_secure(&h, path);
        assert_eq!(body, page, "{path}");
    }

    let (status, h, _) = get("/console").await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(
        h[header::LOCATION],
        "console/index.html",
        "relative, so a path prefix is kept"
    );
    assert_secure(&h, "/console");

    for name in all_assets().iter().filter(|n| *n != "index.html") {
        let (status, h, body) = get(&format!("/console/assets/{name}")).await;
        assert_eq!(status, StatusCode::OK, "{name} is served");
        assert_secure(&h, name);
        let expected = std::fs::read(assets_dir().join(name)).expect("read");
        assert_eq!(body, expected, "{name} is the embedded file");
        let ct = h[header::CONTENT_TYPE].to_str().expect("ascii");
        let want = match name.rsplit('.').next() {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected asset type {other:?}"),
        };
        assert_eq!(ct, want, "{name}");
    }

    for missing in [
        "/console/assets/nope.js",
        "/console/assets/../Cargo.toml",
        "/console/assets/index.html",
        "/console/assets/js",
    ] {
        let (status, h, _) = get(missing).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
        assert_secure(&h, missing);
    }
}

#[test]
fn the_page_has_no_inline_script_or_style() {
    let html = std::fs::read_to_string(assets_dir().join("index.html")).expect("index.html");
    let lower = html.to_lowercase();
    // The only script element is the module loaded from a file.
    assert_eq!(lower.matches("<script").count(), 1);
    assert!(lower.contains("<script type=\"module\" src=\"assets/js/app.js\"></script>"));
    assert!(!lower.contains("<style"), "no inline style element");
    assert!(!lower.contains("style="), "no style attribute");
    assert!(!lower.contains(" on"), "no inline event handler: {html}");
    assert!(!lower.contains("javascript:"));
}

#[test]
fn scripts_use_no_markup_sinks_and_keep_the_token_in_the_session_only() {
    let forbidden = [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "createContextualFragment",
        "DOMParser",
        "eval(",
        "new Function",
        "setAttribute('on",
        "setAttribute(\"on",
        "srcdoc",
        "localStorage",
        "document.cookie",
        "javascript:",
        ".style.",
        "style=",
    ];
    let scripts: Vec<String> = all_assets()
        .into_iter()
        .filter(|n| n.ends_with(".js"))
        .collect();
    assert!(scripts.len() >= 5, "{scripts:?}");
    for name in &scripts {
        let src = std::fs::read_to_string(assets_dir().join(name)).expect("read");
        for f in forbidden {
            assert!(!src.contains(f), "{name} uses {f}");
        }
    }
    let api = std::fs::read_to_string(assets_dir().join("js/api.js")).expect("api.js");
    assert!(api.contains("sessionStorage"));
    assert!(
        api.contains("credentials: 'omit'"),
        "no ambient credentials are sent"
    );
}
