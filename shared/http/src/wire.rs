//! Transport-level refusals in the API's error shape.
//!
//! Two layers, because hyper answers some requests before any router sees them:
//!
//! - [`request_limits`] (a middleware of the one router, so on both hosts): a request URI
//!   over [`MAX_URI_BYTES`] is `414 URI_TOO_LONG`, more than [`MAX_HEADER_COUNT`] header
//!   fields or over [`MAX_HEADER_BYTES`] of them is `431 HEADERS_TOO_LARGE`, with the usual
//!   JSON body. These limits sit below hyper's own and below API Gateway's (10 KiB for the
//!   request line and headers together on HTTP APIs), so a client normally meets ours first.
//! - [`JsonErrorListener`] (`flotilla serve`): hyper answers a request it cannot parse
//!   (`400`), a URI beyond 64 KiB (`414`) or a head beyond its buffer or 100 header fields
//!   (`431`) itself, with an empty body and no hook to change it. The listener's connections
//!   rewrite exactly those bodiless answers into the error shape. The router never answers
//!   these statuses without a body, so nothing else is touched. On AWS, API Gateway answers
//!   unparseable requests itself (`{"message": ...}`; HTTP APIs offer no way to change it).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::error_response;
use flotilla_base::error::{Error, ErrorKind};

/// Longest request URI (path and query) answered normally.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Most header fields in one request.
pub const MAX_HEADER_COUNT: usize = 64;
/// Most bytes of header names and values in one request.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Refuses over-long URIs and oversized header sections with the API's error shape.
pub async fn request_limits(req: Request, next: Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return error_response(&Error::new(
            ErrorKind::UriTooLong,
            format!("the request URI is longer than {MAX_URI_BYTES} bytes"),
        ));
    }
    let headers = req.headers();
    let bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if headers.len() > MAX_HEADER_COUNT || bytes > MAX_HEADER_BYTES {
        return error_response(&Error::new(
            ErrorKind::HeadersTooLarge,
            format!(
                "the request has more than {MAX_HEADER_COUNT} header fields or {MAX_HEADER_BYTES} bytes of them"
            ),
        ));
    }
    next.run(req).await
}

/// A TCP listener for `axum::serve` whose connections answer hyper's own parse errors in
/// the API's error shape.
pub struct JsonErrorListener(pub tokio::net::TcpListener);

impl axum::serve::Listener for JsonErrorListener {
    type Io = JsonErrorIo<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.0).await;
        (JsonErrorIo::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// The peer of a [`JsonErrorListener`] connection, for
/// `into_make_service_with_connect_info::<Peer>()` (read as `ConnectInfo<Peer>`: the source
/// address of the token routes' limiter, `crate::oauth::Source`).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, JsonErrorListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, JsonErrorListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

/// A connection that rewrites hyper's bodiless `400`/`414`/`431` answers.
pub struct JsonErrorIo<T> {
    inner: T,
    pending: Vec<u8>,
    written: usize,
}

impl<T> JsonErrorIo<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }
}

/// The error-shaped replacement of a bodiless parse-error answer, if `buf` is one.
fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(buf).ok()?;
    let (status, code, message) = if text.starts_with("HTTP/1.1 400 ") {
        (
            "400 Bad Request",
            ErrorKind::InvalidArgument,
            "the request is not valid HTTP/1.1",
        )
    } else if text.starts_with("HTTP/1.1 414 ") {
        (
            "414 URI Too Long",
            ErrorKind::UriTooLong,
            "the request URI is too long",
        )
    } else if text.starts_with("HTTP/1.1 431 ") {
        (
            "431 Request Header Fields Too Large",
            ErrorKind::HeadersTooLarge,
            "the request head is too large",
        )
    } else {
        return None;
    };
    let head_only = text.ends_with("\r\n\r\n") && text.matches("\r\n\r\n").count() == 1;
    let empty = text
        .lines()
        .any(|l| l.eq_ignore_ascii_case("content-length: 0"));
    if !head_only || !empty {
        return None;
    }
    let body = serde_json::json!({
        "error": {"code": code.as_str(), "message": message, "details": {}}
    })
    .to_string();
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncWrite + Unpin> JsonErrorIo<T> {
    /// Writes out a pending replacement.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonErrorIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonErrorIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_drain(cx))?;
        if let Some(replacement) = rewrite(buf) {
            self.pending = replacement;
            // Whatever is not written now goes out at the next write, flush or shutdown.
            if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then hands every answer head over as one buffer, which is what
    // `rewrite` inspects.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodiless_parse_error_answers_are_rewritten() {
        let hyper_431 =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(rewrite(hyper_431).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
        assert!(out.contains("\"HEADERS_TOO_LARGE\""), "{out}");
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n";
        assert!(rewrite(ours).is_none());
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert!(rewrite(ok).is_none());
    }
}
