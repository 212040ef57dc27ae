#![forbid(unsafe_code)]
//! The operator web console, served under `/console` by the one API router (so both
//! `flotilla serve` and the api Lambda serve it, with no separate deployment).
//!
//! The console is a static single-page application: plain ES modules and one stylesheet,
//! embedded in the binary at compile time, so building it needs no JavaScript toolchain.
//! It holds no server-side state and no secret: the page asks for a bearer token, keeps it
//! in the tab's `sessionStorage` and calls the JSON API (`/v1`) with it, so the API's own
//! authentication and account scoping govern everything the console can see or change.
//!
//! Every console response carries a strict Content-Security-Policy (no inline script or
//! style, same-origin only, no framing) and `X-Content-Type-Options: nosniff`. See
//! `docs/console.md`.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy on every console response: only same-origin scripts, styles, images and API
/// calls; no inline script or style, no plugins, no framing, no `<base>` rewriting, forms
/// post nowhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; object-src 'none'; \
base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    /// Path below `/console/assets/`.
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of `assets/` except `index.html` (`tests/serve.rs` requests each file there).
static ASSETS: &[Asset] = &[
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("js/api.js", JS),
    asset!("js/app.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/engines.js", JS),
    asset!("js/pages/access.js", JS),
    asset!("js/pages/activity.js", JS),
    asset!("js/pages/accounts.js", JS),
    asset!("js/pages/catalogs.js", JS),
    asset!("js/pages/indexes.js", JS),
    asset!("js/pages/integrations.js", JS),
    asset!("js/pages/overlays.js", JS),
    asset!("js/render.js", JS),
];

const INDEX_HTML: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/index.html"));

/// The console's routes, to be merged into the API router (any router state).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(redirect_to_page))
        .route("/console/", get(index))
        .route("/console/index.html", get(index))
        .route("/console/assets/{*path}", get(asset))
}

/// `/console` → `console/index.html`: relative, so a path prefix in front of the API is
/// kept, and below `/console/` so that API Gateway's public `/console/{proxy+}` route (which
/// an empty remainder would not match) serves it. The page resolves its assets and the API
/// relative to itself.
async fn redirect_to_page() -> Response {
    let mut resp = StatusCode::PERMANENT_REDIRECT.into_response();
    resp.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_static("console/index.html"),
    );
    secure(resp.headers_mut(), false);
    resp
}

async fn index() -> Response {
    respond(
        StatusCode::OK,
        "text/html; charset=utf-8",
        INDEX_HTML,
        false,
    )
}

async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == path) {
        Some(a) => respond(StatusCode::OK, a.content_type, a.body, true),
        None => respond(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            b"no such console asset\n",
            false,
        ),
    }
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: &'static [u8],
    cache: bool,
) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secure(h, cache);
    resp
}

/// The security headers of every console response. Assets may be revalidated but not stored
/// by shared caches; the page itself is never cached (a deployment changes it at once).
fn secure(h: &mut HeaderMap, cache: bool) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if cache {
            "private, no-cache"
        } else {
            "no-store"
        }),
    );
}
