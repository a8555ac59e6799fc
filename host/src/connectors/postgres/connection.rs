//! Connecting to PostgreSQL (with TLS as configured), naming the server
//! without the password, and telling transient errors from the others.

use super::config::TlsMode;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use postgres_openssl::MakeTlsConnector;
use std::path::PathBuf;
use std::time::Duration;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// tokio-postgres's keepalive idle time when the DSN sets none.
const DEFAULT_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// Keepalives, unless the DSN sets them: idle 30 s, then every 10 s, 3
/// unanswered ones end the connection.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

/// A database to connect to.
pub struct Target {
    config: Config,
    tls: MakeTlsConnector,
    shown: String,
}

impl Target {
    /// Reads the DSN; the error never repeats it (it holds the password).
    pub fn new(dsn: &str, tls: Option<TlsMode>, ca_file: Option<PathBuf>) -> Result<Self, String> {
        let mut config: Config = dsn.parse().map_err(|e: tokio_postgres::Error| {
            // The parser's message names an option or says what is missing;
            // it never quotes values.
            format!(
                "the DSN is not valid ({e}): write `postgres://user:password@host:port/database` or `host=… user=… dbname=…`"
            )
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // A connection the network cut without a word (a half-open one)
        // is noticed within about a minute, not after the system's two
        // hours: a write waiting on it fails and is retried on a new one.
        if config.get_keepalives_idle() == DEFAULT_KEEPALIVE_IDLE {
            config.keepalives_idle(KEEPALIVE_IDLE);
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(KEEPALIVE_INTERVAL);
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(KEEPALIVE_RETRIES);
        }
        if config.get_application_name().is_none() {
            config.application_name("mailer");
        }
        let mut builder = SslConnector::builder(SslMethod::tls()).map_err(|e| format!("TLS: {e}"))?;
        match tls {
            Some(TlsMode::VerifyFull) => {
                config.ssl_mode(SslMode::Require);
                if let Some(ca) = &ca_file {
                    builder
                        .set_ca_file(ca)
                        .map_err(|e| format!("TLS: cannot read `ca_file` {}: {e}", ca.display()))?;
                }
            }
            other => {
                // Like libpq: below verify-full, TLS encrypts but checks no
                // certificate.
                builder.set_verify(SslVerifyMode::NONE);
                match other {
                    Some(TlsMode::Disable) => config.ssl_mode(SslMode::Disable),
                    Some(TlsMode::Prefer) => config.ssl_mode(SslMode::Prefer),
                    Some(TlsMode::Require) => config.ssl_mode(SslMode::Require),
                    _ => &mut config,
                };
            }
        }
        let tls = MakeTlsConnector::new(builder.build());
        let shown = shown(&config);
        Ok(Self { config, tls, shown })
    }

    /// `host:port/database as user`, for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Connects; the connection is driven by `runtime`.
    pub fn connect(&self, runtime: &tokio::runtime::Runtime) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = runtime.block_on(self.config.connect(self.tls.clone()))?;
        runtime.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection ended");
            }
        });
        Ok(client)
    }
}

/// The server, database and user of `config`, never the password.
fn shown(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(h, p)| match h {
            Host::Tcp(name) => format!("{name}:{p}"),
            Host::Unix(path) => format!("{}:{p}", path.display()),
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(",")
    };
    let user = config.get_user().unwrap_or("(default user)");
    let db = config.get_dbname().unwrap_or(user);
    format!("{hosts}/{db} as {user}")
}

/// Whether `e` may pass by itself: the connection broke or was closed by
/// the server (e.g. `pg_terminate_backend`, a restart), too many
/// connections, a serialization failure or deadlock. Errors about what was
/// sent (types, constraints, permissions, credentials) are not.
pub fn is_transient(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::TOO_MANY_CONNECTIONS,
                    SqlState::T_R_SERIALIZATION_FAILURE,
                    SqlState::T_R_DEADLOCK_DETECTED,
                    SqlState::IDLE_SESSION_TIMEOUT,
                ]
                .contains(code)
        }
    }
}

/// A message for `e`: PostgreSQL's own message, detail and hint when the
/// server sent them.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = format!("{} ({})", db.message(), db.code().code());
            if let Some(d) = db.detail() {
                s.push_str(&format!("; {d}"));
            }
            if let Some(h) = db.hint() {
                s.push_str(&format!("; hint: {h}"));
            }
            s
        }
        None => {
            // The causes (e.g. "Connection refused") are in the chain.
            let mut s = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                s.push_str(&format!(": {c}"));
                cause = c.source();
            }
            s
        }
    }
}

/// `name` quoted as an SQL identifier.
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A table name as written (`name` or `schema.name`) quoted.
pub fn quote_table(table: &str) -> String {
    match table.split_once('.') {
        Some((schema, name)) => format!("{}.{}", quote(schema), quote(name)),
        None => quote(table),
    }
}

/// Another table in the same schema as `table`.
pub fn sibling(table: &str, name: &str) -> String {
    match table.split_once('.') {
        Some((schema, _)) => format!("{}.{}", quote(schema), quote(name)),
        None => quote(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        let t = Target::new("postgres://alice:s3cret@db.example:6543/orders", None, None).unwrap();
        assert_eq!(t.shown(), "db.example:6543/orders as alice");
        let t = Target::new("host=h user=bob password=s3cret", None, None).unwrap();
        assert_eq!(t.shown(), "h:5432/bob as bob");
        let e = Target::new("postgres://alice:s3cret@db:notaport/x", None, None)
            .err()
            .unwrap();
        assert!(!e.contains("s3cret"), "{e}");
        assert!(e.starts_with("the DSN is not valid"), "{e}");
    }

    #[test]
    fn a_silent_connection_is_noticed_within_a_minute_unless_the_dsn_says_otherwise() {
        let t = Target::new("postgres://a@h/d", None, None).unwrap();
        assert_eq!(t.config.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(t.config.get_keepalives_interval(), Some(KEEPALIVE_INTERVAL));
        assert_eq!(t.config.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
        let t = Target::new("host=h user=a keepalives_idle=600", None, None).unwrap();
        assert_eq!(t.config.get_keepalives_idle(), Duration::from_secs(600));
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_table("orders"), "\"orders\"");
        assert_eq!(quote_table("s.t\"x"), "\"s\".\"t\"\"x\"");
        assert_eq!(sibling("s.t", "mailer_progress"), "\"s\".\"mailer_progress\"");
    }
}
