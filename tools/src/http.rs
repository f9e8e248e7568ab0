//! The HTTP side of `iwarp-serve`'s `/metrics`: hyper's HTTP/1 server on a
//! tokio runtime of its own (one thread, plus a small pool for the
//! blocking scrapes), so the stack's loop thread never waits on a client.
//!
//! Each connection is served concurrently and lives at most
//! [`Limits::deadline`] in all (request read, scrape and response write),
//! with [`Limits::header_timeout`] to send its request head; one request per
//! connection (`Connection: close`). At most [`Limits::max_connections`]
//! are open at once; one over the cap gets a `503` and is closed at once.
//! A client sending one byte a second, or an idle one, costs a slot for the
//! deadline and nothing else.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

use crate::prom::{Format, ServeMetrics};

/// Bounds of the endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more are answered `503` and closed.
    pub max_connections: usize,
    /// Time a connection has to send its request head.
    pub header_timeout: Duration,
    /// Time a connection may stay open in all.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            header_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(15),
        }
    }
}

/// Produces the body of a scrape in a format, or says why it cannot
/// (answered `503`). Called on a blocking thread.
pub type Scrape = dyn Fn(Format) -> Result<String, String> + Send + Sync;

/// Serve `GET /metrics` on `listener` (bound already) from a new thread
/// for the rest of the process; other paths get 404, other methods 405.
/// Fails only while setting up (before anything is served).
pub fn spawn(
    listener: std::net::TcpListener,
    limits: Limits,
    metrics: ServeMetrics,
    scrape: Arc<Scrape>,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        // The scrapes wait on the loop thread one at a time anyway.
        .max_blocking_threads(2)
        .build()?;
    listener.set_nonblocking(true)?;
    let listener = {
        let _in = rt.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || rt.block_on(accept_loop(listener, limits, metrics, scrape)))?;
    Ok(())
}

/// What a client over the cap gets (best effort: written without waiting).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
Content-Length: 28\r\nConnection: close\r\n\r\ntoo many connections (cap)\r\n";

async fn accept_loop(
    listener: tokio::net::TcpListener,
    limits: Limits,
    metrics: ServeMetrics,
    scrape: Arc<Scrape>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Scrapes on the blocking pool, finished or not: one whose connection
    // met its deadline still holds its permit until it returns, so that a
    // wedged stack cannot make them pile up.
    let scrapes = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors, say: try again shortly.
                eprintln!("iwarp-serve: metrics endpoint: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.http_refused.inc();
            let _ = stream.try_write(BUSY);
            continue;
        };
        let (metrics, scrape, scrapes) = (metrics.clone(), scrape.clone(), scrapes.clone());
        tokio::spawn(async move {
            metrics.http_open.inc();
            let svc = hyper::service::service_fn(|req| {
                let (metrics, scrape, scrapes) = (metrics.clone(), scrape.clone(), scrapes.clone());
                async move { Ok::<_, Infallible>(answer(req, &metrics, scrape, &scrapes).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), svc);
            // Dropping the connection on the deadline closes it.
            if tokio::time::timeout(limits.deadline, conn).await.is_err() {
                metrics.http_timeouts.inc();
            }
            metrics.http_open.dec();
            drop(slot);
        });
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

async fn answer(
    req: Request<Incoming>,
    metrics: &ServeMetrics,
    scrape: Arc<Scrape>,
    scrapes: &Arc<Semaphore>,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    if req.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found; try /metrics\n");
    }
    let format = Format::from_accept(
        req.headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    );
    let Ok(permit) = scrapes.clone().try_acquire_owned() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many scrapes waiting on the stack\n",
        );
    };
    let started = std::time::Instant::now();
    let body = tokio::task::spawn_blocking(move || {
        let body = scrape(format);
        drop(permit);
        body
    })
    .await;
    metrics
        .scrape_seconds
        .observe(started.elapsed().as_secs_f64());
    match body {
        Ok(Ok(body)) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            r
        }
        Ok(Err(e)) => {
            let mut r = Response::new(Full::new(Bytes::from(format!("{e}\n"))));
            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            r
        }
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the scrape panicked\n"),
    }
}
