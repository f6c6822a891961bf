//! The server's own limits: a client must send its headers in time and be answered in time, at
//! most so many connections are served at once, and every answer carries the headers that keep a
//! page from being framed, sniffed or leaking its address.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::sync::{Semaphore, watch};
use tower_service::Service as _;

/// How long in-flight requests may take to finish once the server is told to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Pause after a failed accept (the process is out of file descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Content-Security-Policy of every answer: scripts and styles from kassa only (styles may be
/// inline: the pages carry their small style sheets with them), images from kassa or inline (QR
/// codes), polling to kassa, no plug-ins, no `<base>`, and never inside a frame. Forms may post to
/// a gateway (a hand-off page submits to the gateway's own address).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The limits of the connections and requests.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `stop` turns true, then lets in-flight requests finish
/// (for at most [`SHUTDOWN_GRACE`]). Each connection has TCP_NODELAY set, so an answer goes out
/// as soon as it is written rather than waiting, by Nagle's algorithm, for the client to
/// acknowledge the segment before it (BENCHMARKS.md).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ServerLimits,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        // A connection past the bound waits in the listen queue until one ends.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            () = stopped(&mut stop) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stopped(&mut stop) => break,
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            let mut router = router.clone();
            async move { Ok::<_, Infallible>(router.call(req).await.unwrap_or_else(|never| match never {})) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => tracing::warn!("requests still running at shutdown were cut off"),
    }
}

/// Resolves once the stop signal is given (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Middleware: the request is answered within the request timeout (its body read included), or
/// with 408 `request_timeout`.
pub async fn within_time(
    axum::extract::State(timeout): axum::extract::State<Duration>,
    req: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            metrics::counter!("kassa_request_timeouts_total").increment(1);
            let body = json!({"error": {"code": "request_timeout", "message": format!("the request was not answered within {} s", timeout.as_secs())}});
            (StatusCode::REQUEST_TIMEOUT, [(header::CONNECTION, "close")], axum::Json(body)).into_response()
        }
    }
}

/// Middleware: the security headers of every answer.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}
