//! The one mapping of service errors ([`flotilla_error::Error`]) to HTTP responses.
//!
//! Services return `flotilla_error::Result`; handlers return [`HttpResult`], and `?` turns a
//! service error into an [`HttpError`]. The status table and body are
//! [`flotilla_http_status`] (re-exported here); a server-side answer (`UNAVAILABLE`,
//! `INTERNAL`) carries only an `error_id`; the detail is logged under that id and never sent
//! to the caller. `UNAVAILABLE` also answers `Retry-After: 1`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flotilla_error::{Error, ErrorKind};
pub use flotilla_http_status::{status_of, to_parts};

/// A service error answered over HTTP. Handlers return [`HttpResult`]; `?` converts.
#[derive(Debug)]
pub struct HttpError(pub Error);

impl HttpError {
    pub fn status(&self) -> StatusCode {
        status_of(self.0.kind)
    }

    pub fn into_inner(self) -> Error {
        self.0
    }
}

impl From<Error> for HttpError {
    fn from(e: Error) -> Self {
        HttpError(e)
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for HttpError {}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        error_response(&self.0)
    }
}

/// The response of an error (what [`HttpError`] answers), for code that holds an
/// [`Error`] and builds a response by hand (fallbacks, middleware refusals).
pub fn error_response(e: &Error) -> Response {
    let (status, body) = to_parts(e);
    let mut resp = (status, axum::Json(body)).into_response();
    if e.kind == ErrorKind::Unavailable {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

pub type HttpResult<T> = Result<T, HttpError>;

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use serde_json::{Value, json};

    use super::*;

    async fn answer(e: Error) -> (StatusCode, Option<HeaderValue>, Value) {
        let resp = HttpError::from(e).into_response();
        let status = resp.status();
        let retry_after = resp.headers().get(header::RETRY_AFTER).cloned();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, retry_after, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_client_error_shows_its_message_and_details() {
        let e = Error::new(ErrorKind::ManagedByOverlay, "managed").with_detail("overlay_id", "o1");
        let (status, retry_after, body) = answer(e).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(retry_after, None);
        assert_eq!(
            body,
            json!({"error": {"code": "MANAGED_BY_OVERLAY", "message": "managed",
                             "details": {"overlay_id": "o1"}}})
        );
    }

    #[tokio::test]
    async fn a_server_error_shows_only_an_error_id() {
        let e = Error::internal("secret backend detail").with_detail("leak", "no");
        let (status, retry_after, body) = answer(e).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(retry_after, None);
        assert_eq!(body["error"]["code"], "INTERNAL");
        assert_eq!(body["error"]["message"], "internal error");
        let details = body["error"]["details"].as_object().unwrap();
        assert_eq!(details.len(), 1);
        assert!(
            details["error_id"]
                .as_str()
                .is_some_and(|id| !id.is_empty())
        );
        assert!(!body.to_string().contains("secret backend detail"));
    }

    #[tokio::test]
    async fn unavailable_answers_retry_after() {
        let (status, retry_after, body) = answer(Error::unavailable("throttled")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after, Some(HeaderValue::from_static("1")));
        assert_eq!(body["error"]["code"], "UNAVAILABLE");
        assert!(!body.to_string().contains("throttled"));
    }

    #[test]
    fn question_mark_converts_a_service_error() {
        fn service() -> flotilla_error::Result<()> {
            Err(Error::not_found("overlay"))
        }
        fn handler() -> HttpResult<()> {
            service()?;
            Ok(())
        }
        let e = handler().unwrap_err();
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(e.into_inner().message, "overlay not found");
    }
}
