//! The admin API over TLS (`[admin] tls_cert` and `tls_key`): an axum
//! [`Listener`] whose connections are OpenSSL streams. Handshakes run in
//! tasks of their own, each bounded in time, so a client that opens a
//! connection and says nothing holds up no one else.

use crate::plan::AdminTls;
use axum::serve::Listener;
use openssl::ssl::{Ssl, SslAcceptor, SslFiletype, SslMethod};
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_openssl::SslStream;

/// How long a client has to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Handshakes done, waiting for the server to take them.
const READY: usize = 64;

/// The TLS settings of `tls` (the server's certificate chain and key,
/// PEM), checked: an error naming the file that does not do.
pub(super) fn acceptor(tls: &AdminTls) -> std::io::Result<SslAcceptor> {
    let failed = |what: &str, path: &std::path::Path, e: openssl::error::ErrorStack| {
        std::io::Error::other(format!("{what} {}: {e}", path.display()))
    };
    let mut builder = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())
        .map_err(|e| std::io::Error::other(format!("setting up TLS: {e}")))?;
    builder
        .set_certificate_chain_file(&tls.cert)
        .map_err(|e| failed("reading the certificate (`tls_cert`)", &tls.cert, e))?;
    builder
        .set_private_key_file(&tls.key, SslFiletype::PEM)
        .map_err(|e| failed("reading the private key (`tls_key`)", &tls.key, e))?;
    builder
        .check_private_key()
        .map_err(|e| failed("the private key does not match the certificate", &tls.cert, e))?;
    Ok(builder.build())
}

/// Connections that finished their TLS handshake.
pub(super) struct TlsListener {
    ready: mpsc::Receiver<(SslStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener`, each connection's handshake by `acceptor`;
    /// must be called inside the server's runtime.
    pub(super) fn new(listener: TcpListener, acceptor: SslAcceptor) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let (done, ready) = mpsc::channel(READY);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, mostly: wait, as axum does.
                        tracing::debug!(error = %e, "the admin API could not accept a connection");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if done.is_closed() {
                    // The server stopped.
                    return;
                }
                let (acceptor, done) = (acceptor.clone(), done.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, handshake(&acceptor, tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = done.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "an admin TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "an admin TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, addr })
    }
}

async fn handshake(acceptor: &SslAcceptor, tcp: TcpStream) -> Result<SslStream<TcpStream>, String> {
    let ssl = Ssl::new(acceptor.context()).map_err(|e| e.to_string())?;
    let mut stream = SslStream::new(ssl, tcp).map_err(|e| e.to_string())?;
    Pin::new(&mut stream).accept().await.map_err(|e| e.to_string())?;
    Ok(stream)
}

impl Listener for TlsListener {
    type Io = SslStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task is gone (the runtime stops): no more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
