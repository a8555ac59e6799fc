//! The admin API: an HTTP server (axum) on loopback by default, every
//! `/api` request carrying the bearer token of `[admin]`. It lists the
//! plugin operators, swaps and rolls back their plugins (through [`crate::swap`]), and shows the
//! history of swaps; it streams the records leaving a source or operator
//! (`mailer tap`); it serves the Prometheus metrics at `/metrics` and the
//! dashboard at `/`. It runs on its own thread with its own single-threaded
//! runtime, over TLS only with `[admin] tls_cert` and `tls_key`. Its
//! client ([`AdminClient`]) sends the token over plain HTTP to loopback
//! only, and in cluster mode to the addresses the manifest lists only
//! ([`AdminPeers`]).

mod client;
mod dashboard;
mod guard;
mod peers;
mod routes;
mod state;
mod tap;
mod tls_client;
mod tls_server;

pub use client::{AdminClient, ClientError};
pub use peers::AdminPeers;
pub use routes::AdminState;
pub use tls_client::ClientTls;

use crate::plan::AdminTls;
use futures_util::future::Either;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::Duration;

/// How long open requests may take to finish once the server stops.
const GRACE: Duration = Duration::from_secs(2);

/// A running admin server; dropping it stops the server.
pub struct AdminServer {
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Its taps end before it stops: the server waits for open streams.
    telemetry: std::sync::Arc<crate::metrics::Telemetry>,
}

impl AdminServer {
    /// Binds `listen` and serves `state`, over TLS only when `tls` is set.
    pub fn start(listen: SocketAddr, tls: Option<&AdminTls>, state: AdminState) -> std::io::Result<Self> {
        let acceptor = tls.map(tls_server::acceptor).transpose()?;
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let telemetry = state.telemetry.clone();
        let app = routes::router(state);
        let thread = std::thread::Builder::new().name("admin".into()).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "the admin server could not start its runtime");
                    return;
                }
            };
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "the admin server could not listen");
                        return;
                    }
                };
                match acceptor {
                    None => serve(listener, app, stopped).await,
                    Some(acceptor) => match tls_server::TlsListener::new(listener, acceptor) {
                        Ok(listener) => serve(listener, app, stopped).await,
                        Err(e) => tracing::error!(error = %e, "the admin server could not listen"),
                    },
                }
            });
        })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(%addr, scheme, "admin API listening");
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
            telemetry,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Serves `app` on `listener` until `stopped` turns true.
async fn serve<L>(listener: L, app: axum::Router, stopped: tokio::sync::watch::Receiver<bool>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let mut cut = stopped.clone();
    let mut stopped = stopped;
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stopped.wait_for(|&stop| stop).await;
    });
    // Requests under way get a moment to finish; a client that reads
    // nothing (a tap) does not hold the stop.
    let cut = async move {
        let _ = cut.wait_for(|&stop| stop).await;
        tokio::time::sleep(GRACE).await;
    };
    let served = Box::pin(server.into_future());
    match futures_util::future::select(served, Box::pin(cut)).await {
        Either::Left((Err(e), _)) => tracing::error!(error = %e, "the admin server stopped"),
        Either::Left((Ok(()), _)) => {}
        Either::Right(_) => tracing::warn!("admin connections still open were cut at the stop"),
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.telemetry.taps.stop();
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
