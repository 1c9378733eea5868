//! The HTTP/1.1 server of `napilab export` (docs/export.md, "HTTP server").
//!
//! hyper on one current-thread tokio runtime, on the thread that calls [`serve`]. The
//! exporter runs for days on a port other programs reach, so every way a client can hold
//! the server's memory or connections is bounded:
//!
//! - a request head (request line and headers) is at most [`MAX_HEADER_BYTES`]; past it
//!   the client gets 431 and the connection closes, and no connection buffers more than
//!   that much of a head (hyper's `max_header_size` and `max_buf_size`);
//! - a head must arrive within the header timeout, counted from the first byte of a
//!   request or from the end of the previous answer on a kept-alive connection: slow
//!   clients (slowloris) and idle kept-alive connections are closed after it;
//! - at most `max_connections` connections are open; one more is closed as soon as it is
//!   accepted, counted and logged.
//!
//! Answers are built by the caller's function from a request's method, path and Accept
//! header; their bodies are shared `Bytes`, so a scrape copies no rendering.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, Semaphore};

/// The largest request head served. A Prometheus scrape's head is about 300 bytes;
/// 16 KiB leaves room for proxies' and browsers' headers.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Default time a client has to send a request head.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on open connections. Each costs at most about MAX_HEADER_BYTES of read
/// buffer plus a task, so 512 bound the server's memory to a few MB.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// On stop, how long open connections get to finish the answer they are writing.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// The refused-connection log line is written at most this often.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

/// The server's limits (docs/export.md, "HTTP server").
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// What the server counts, exported as napilab_exporter_http_* by the sampler.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections accepted (within the bound) since the start.
    pub accepted: AtomicU64,
    /// Connections closed at once because `max_connections` were open.
    pub refused_over_limit: AtomicU64,
    /// Connections closed because a request head did not arrive within the timeout.
    pub header_timeouts: AtomicU64,
    /// Connections answered 431 and closed because a request head was too large.
    pub header_too_large: AtomicU64,
}

/// A snapshot of [`HttpCounters`].
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpCounts {
    pub open: u64,
    pub accepted: u64,
    pub refused_over_limit: u64,
    pub header_timeouts: u64,
    pub header_too_large: u64,
}

impl HttpCounters {
    pub fn counts(&self) -> HttpCounts {
        HttpCounts {
            open: self.open.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            refused_over_limit: self.refused_over_limit.load(Ordering::Relaxed),
            header_timeouts: self.header_timeouts.load(Ordering::Relaxed),
            header_too_large: self.header_too_large.load(Ordering::Relaxed),
        }
    }
}

/// One request, as far as the exporter looks at it.
pub struct Asked<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub accept: Option<&'a str>,
}

pub type Answer = Response<Full<Bytes>>;

/// Binds `addr` now, so a taken port is reported before anything else starts.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| {
        format!("cannot listen on {addr}; choose another --listen address or stop what uses it")
    })?;
    // tokio's listener needs a non-blocking socket.
    listener
        .set_nonblocking(true)
        .with_context(|| format!("cannot make the listening socket on {addr} non-blocking"))?;
    Ok(listener)
}

/// Serves on `listener` until `stop` is notified, on the calling thread.
pub fn serve<F>(
    listener: std::net::TcpListener,
    limits: HttpLimits,
    counters: Arc<HttpCounters>,
    stop: Arc<Notify>,
    answer: F,
) -> Result<()>
where
    F: Fn(&Asked) -> Answer + Clone + Send + Sync + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the HTTP server's runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .context("cannot register the listening socket with the HTTP server's runtime")?;
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_header_size(MAX_HEADER_BYTES)
            // The read buffer never grows past a head's limit (the default is ~400 KB).
            .max_buf_size(MAX_HEADER_BYTES);
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut refusals = RefusalLog::default();
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => accepted,
                () = stop.notified() => break,
            };
            let stream = match stream {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before accept: nothing to
                    // answer; a short pause keeps a persistent error from spinning.
                    eprintln!("napilab export: accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                counters.refused_over_limit.fetch_add(1, Ordering::Relaxed);
                drop(stream);
                refusals.refused(limits.max_connections);
                continue;
            };
            counters.accepted.fetch_add(1, Ordering::Relaxed);
            let open = Open::new(counters.clone());
            let answer = answer.clone();
            let service = hyper::service::service_fn(move |request: Request<_>| {
                let response = answer(&asked(&request));
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            let counters = counters.clone();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    if e.is_timeout() {
                        counters.header_timeouts.fetch_add(1, Ordering::Relaxed);
                    } else if e.is_parse_too_large() {
                        counters.header_too_large.fetch_add(1, Ordering::Relaxed);
                    }
                    // Other errors are the client's (reset, malformed request: hyper
                    // answered 400): nothing for the exporter to do.
                }
                drop((slot, open));
            });
        }
        // Stop accepting, let answers being written finish, then drop what is left (slow
        // clients that never sent a head among them).
        drop(listener);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
        anyhow::Ok(())
    })
}

fn asked<B>(request: &Request<B>) -> Asked<'_> {
    Asked {
        method: request.method(),
        path: request.uri().path(),
        accept: request
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok()),
    }
}

/// Counts one open connection while it lives.
struct Open(Arc<HttpCounters>);

impl Open {
    fn new(counters: Arc<HttpCounters>) -> Open {
        counters.open.fetch_add(1, Ordering::Relaxed);
        Open(counters)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Logs refused connections at most once a REFUSAL_LOG_EVERY, with how many since the
/// last line, so a flood of connections does not flood the log too.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    fn refused(&mut self, bound: usize) {
        self.unlogged += 1;
        if self.last.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_EVERY) {
            eprintln!(
                "napilab export: {} connection(s) closed at once: {bound} were open, the max_connections bound (napilab_exporter_http_connections_closed_total{{reason=\"over_limit\"}} counts them)",
                self.unlogged
            );
            self.last = Some(Instant::now());
            self.unlogged = 0;
        }
    }
}

/// A response with `body`, its Content-Type and any more headers.
pub fn answer(status: u16, body: Bytes, content_type: &str, extra: &[(&str, &str)]) -> Answer {
    let mut builder = Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, content_type);
    for (name, value) in extra {
        builder = builder.header(*name, *value);
    }
    // Status codes and headers are this module's callers' constants, which are valid.
    builder.body(Full::new(body)).unwrap_or_else(|_| {
        let mut fallback = Response::new(Full::new(Bytes::from_static(b"internal error\n")));
        *fallback.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        fallback
    })
}
