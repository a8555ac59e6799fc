//! The admin API: an HTTP server (axum) on loopback by default, every
//! `/api` request carrying the bearer token of `[admin]`. It lists the
//! plugin operators, swaps and rolls back their plugins (through [`crate::swap`]), and shows the
//! history of swaps; it serves the Prometheus metrics at `/metrics` and the
//! dashboard at `/`. It runs on its own thread with its own single-threaded
//! runtime.

mod client;
mod dashboard;
mod guard;
mod routes;

pub use client::{AdminClient, ClientError};
pub use routes::AdminState;

use std::net::SocketAddr;

/// A running admin server; dropping it stops the server.
pub struct AdminServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AdminServer {
    /// Binds `listen` and serves `state`.
    pub fn start(listen: SocketAddr, state: AdminState) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
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
                let server = axum::serve(listener, app).with_graceful_shutdown(async {
                    let _ = stopped.await;
                });
                if let Err(e) = server.await {
                    tracing::error!(error = %e, "the admin server stopped");
                }
            });
        })?;
        tracing::info!(%addr, "admin API listening");
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
