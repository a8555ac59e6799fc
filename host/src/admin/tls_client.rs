//! HTTPS for the admin API's client: OpenSSL under ureq (ureq's own TLS
//! would add a second TLS stack; the Kafka and PostgreSQL clients use
//! OpenSSL already). The server's certificate must chain to the CA of
//! `[admin] tls_ca` and name the address asked (an IP address in its
//! `subjectAltName`).

use openssl::ssl::{HandshakeError, SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::X509;
use std::fmt;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport, TransportAdapter,
};

/// Whom the client trusts: the CA certificates of one PEM file.
#[derive(Clone)]
pub struct ClientTls {
    connector: Arc<SslConnector>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls").finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts the certificates in the PEM file `ca` (and only them).
    pub fn trusting(ca: &Path) -> Result<Self, String> {
        let reading = |e: &dyn fmt::Display| format!("the admin API's CA `{}`: {e}", ca.display());
        let pem = std::fs::read(ca).map_err(|e| reading(&e))?;
        let certs = X509::stack_from_pem(&pem).map_err(|e| reading(&e))?;
        if certs.is_empty() {
            return Err(reading(&"no certificate in it"));
        }
        let mut store = openssl::x509::store::X509StoreBuilder::new().map_err(|e| reading(&e))?;
        for cert in certs {
            store.add_cert(cert).map_err(|e| reading(&e))?;
        }
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| reading(&e))?;
        builder.set_verify(SslVerifyMode::PEER);
        builder.set_cert_store(store.build());
        Ok(Self {
            connector: Arc::new(builder.build()),
        })
    }

    /// A ureq connector wrapping each `https` connection in TLS.
    pub(super) fn connector(&self) -> OpensslConnector {
        OpensslConnector {
            connector: self.connector.clone(),
        }
    }
}

/// The TLS step of ureq's connector chain, after its TCP connector.
#[derive(Clone)]
pub(super) struct OpensslConnector {
    connector: Arc<SslConnector>,
}

impl fmt::Debug for OpensslConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpensslConnector").finish_non_exhaustive()
    }
}

impl<In: Transport> Connector<In> for OpensslConnector {
    type Out = Either<In, OpensslTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        // An IP address, as the members advertise them; IPv6 in brackets.
        let host = details.uri.host().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut adapter = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        adapter.set_timeout(details.timeout);
        let failed = |e: &dyn fmt::Display| ureq::Error::Other(format!("TLS with {host}: {e}").into());
        let configured = self.connector.configure().map_err(|e| failed(&e))?;
        let stream = configured.connect(host, adapter).map_err(|e| match e {
            HandshakeError::SetupFailure(e) => failed(&e),
            HandshakeError::Failure(mid) => failed(&describe(mid.error(), mid.ssl().verify_result())),
            HandshakeError::WouldBlock(mid) => failed(mid.error()),
        })?;
        let buffers = LazyBuffers::new(
            details.config.input_buffer_size(),
            details.config.output_buffer_size(),
        );
        Ok(Some(Either::B(OpensslTransport { buffers, stream })))
    }
}

/// A failed handshake, with why the certificate was refused if it was.
fn describe(error: &openssl::ssl::Error, verify: openssl::x509::X509VerifyResult) -> String {
    match verify == openssl::x509::X509VerifyResult::OK {
        true => error.to_string(),
        false => format!("the server's certificate is refused: {}", verify.error_string()),
    }
}

/// An HTTPS connection.
pub(super) struct OpensslTransport {
    buffers: LazyBuffers,
    stream: openssl::ssl::SslStream<TransportAdapter>,
}

impl fmt::Debug for OpensslTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpensslTransport").finish_non_exhaustive()
    }
}

impl Transport for OpensslTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}
