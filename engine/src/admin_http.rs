//! The admin listener (`--http ADDR`): plain HTTP/1.1 for operators and
//! their tools, on a thread of its own (never a shard's).
//!
//! - `GET /metrics`: the metrics page (`metrics_page`), OpenMetrics text.
//! - `GET /health`: 200 while the process serves HTTP at all (alive).
//! - `GET /ready`: 200 once the server is ready to serve clients (a broker:
//!   registered, recovered, every shard serving), else 503 and why.
//!
//! It serves a bounded number of connections, each for a bounded time, so a
//! scraper that misbehaves cannot hold the thread or its memory. The pages
//! come from an [`AdminPages`], which the broker and the control plane each
//! implement.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::metrics_page::METRICS_CONTENT_TYPE;

/// Connections served at once; one more is closed at accept.
pub const ADMIN_CONNECTIONS_MAX: usize = 64;
/// How long a client may take to send a request's headers.
const HEADER_READ_TIME_MAX: Duration = Duration::from_secs(10);
/// How long one connection is served, whatever it does (a scraper that
/// keeps its connection reconnects).
const CONNECTION_TIME_MAX: Duration = Duration::from_secs(120);

/// What the admin listener serves.
pub trait AdminPages: Send + Sync + 'static {
    /// The metrics page, in the OpenMetrics text format. Called on a
    /// blocking thread: it may wait (briefly, and bounded) for figures.
    fn metrics_page(&self) -> String;

    /// `Ok` when ready to serve clients, else why not.
    fn readiness(&self) -> Result<(), String>;
}

/// A running admin listener; stopped on [`AdminListener::stop`] or drop.
#[derive(Debug)]
pub struct AdminListener {
    address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl AdminListener {
    /// Listen on `listen` (bound before this returns, so a taken port is
    /// an error here) and serve `pages`.
    pub fn start(listen: SocketAddr, pages: Arc<dyn AdminPages>) -> std::io::Result<AdminListener> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("kelp-http".into())
            .spawn(move || runtime.block_on(serve(listener, pages, stopped)))?;
        log::info!("admin HTTP listening on http://{address} (/metrics, /health, /ready)");
        Ok(AdminListener {
            address,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stop listening and wait for the thread (connections still open are
    /// dropped with it).
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for AdminListener {
    fn drop(&mut self) {
        self.shut_down();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    pages: Arc<dyn AdminPages>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            log::error!("admin HTTP: {e}");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(ADMIN_CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                log::warn!("admin HTTP: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            log::warn!(
                "admin HTTP: refusing {peer}: {ADMIN_CONNECTIONS_MAX} connections already served"
            );
            continue;
        };
        let pages = pages.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request| {
                let pages = pages.clone();
                async move { Ok::<_, Infallible>(answer(&pages, &request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIME_MAX)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIME_MAX, connection).await {
                Ok(Ok(())) | Err(_) => {}
                Ok(Err(e)) => log::debug!("admin HTTP: {peer}: {e}"),
            }
        });
    }
}

async fn answer(pages: &Arc<dyn AdminPages>, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match request.uri().path() {
        "/metrics" => {
            let pages = pages.clone();
            match tokio::task::spawn_blocking(move || pages.metrics_page()).await {
                Ok(page) => {
                    let mut response = Response::new(Full::new(Bytes::from(page)));
                    response
                        .headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
                    response
                }
                Err(e) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("metrics page failed: {e}\n"),
                ),
            }
        }
        "/health" => text(StatusCode::OK, "ok\n".into()),
        "/ready" => match pages.readiness() {
            Ok(()) => text(StatusCode::OK, "ready\n".into()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /health or /ready\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
