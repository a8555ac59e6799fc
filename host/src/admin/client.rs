//! The admin API's client, for `mailer plugin …`: the address and token
//! come from the manifest's `[admin]` (in cluster mode, the address from
//! a member, through [`super::AdminPeers`]). The token goes over plain HTTP
//! to loopback addresses only; with `[admin] tls_cert`, over HTTPS.

use super::ClientTls;
use crate::metrics::TaskSnapshot;
use crate::plan::{AdminSettings, Plan};
use crate::swap::SwapOptions;
use crate::tap::TapLine;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;

/// Why a request to the admin API failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The manifest has no `[admin]`.
    #[error("the manifest has no `[admin]` section: the pipeline serves no admin API")]
    NoAdmin,
    /// Nothing answered.
    #[error("cannot reach the admin API at {addr} (is the pipeline running?): {reason}")]
    Unreachable {
        /// Where it was asked.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// The API answered with an error.
    #[error("the admin API answered {status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its `error` message.
        message: String,
    },
    /// A component is larger than the pipeline takes.
    #[error(
        "the component is {size} bytes, more than the running pipeline takes ({max} bytes): raise `[admin] max_plugin_mb` in its manifest and restart it"
    )]
    TooLarge {
        /// The component's size.
        size: usize,
        /// The pipeline's limit.
        max: u64,
    },
    /// An advertised admin address the manifest does not list.
    #[error(
        "{addr} is not listed in the manifest as an admin address (`[admin] listen`, `[cluster] admin_addresses`): not asked, the token not sent there"
    )]
    NotListed {
        /// The address.
        addr: SocketAddr,
    },
    /// Plain HTTP to an address beyond this machine.
    #[error(
        "{addr} is not a loopback address and the admin API serves no TLS: the token would cross the network in clear (set `[admin] tls_cert` and `tls_key`)"
    )]
    PlainOverNetwork {
        /// The address.
        addr: SocketAddr,
    },
    /// The CA the client trusts cannot be read.
    #[error("{0}")]
    Tls(String),
    /// A plugin file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A client of one pipeline's admin API.
pub struct AdminClient {
    base: String,
    token: String,
    agent: ureq::Agent,
    tls: Option<ClientTls>,
}

impl AdminClient {
    /// The client of the pipeline `plan` describes (one process: its
    /// `[admin] listen`, loopback for an unspecified address).
    pub fn of(plan: &Plan) -> Result<Self, ClientError> {
        let AdminSettings {
            listen, token, tls, ..
        } = plan.admin.clone().ok_or(ClientError::NoAdmin)?;
        let host = if listen.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], listen.port()))
        } else {
            listen
        };
        let tls = tls
            .map(|t| ClientTls::trusting(&t.ca))
            .transpose()
            .map_err(ClientError::Tls)?;
        Self::at(host, token, tls.as_ref())
    }

    /// The client of the admin API at `addr`, asking with `token`: over
    /// HTTPS trusting `tls`, else over plain HTTP, which only a loopback
    /// address gets (the token would cross the network in clear).
    pub fn at(addr: SocketAddr, token: String, tls: Option<&ClientTls>) -> Result<Self, ClientError> {
        if tls.is_none() && !addr.ip().is_loopback() {
            return Err(ClientError::PlainOverNetwork { addr });
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        Ok(Self {
            base: format!("{scheme}://{addr}/api"),
            token,
            // A swap is answered once the uploaded component compiled: tens
            // of MB take minutes on a loaded machine.
            agent: agent(Some(std::time::Duration::from_secs(600)), tls),
            tls: tls.cloned(),
        })
    }

    /// `GET /api/pipelines`.
    pub fn pipelines(&self) -> Result<Value, ClientError> {
        self.get("pipelines")
    }

    /// `GET /api/operators`.
    pub fn operators(&self) -> Result<Value, ClientError> {
        self.get("operators")
    }

    /// `GET /api/swaps`.
    pub fn swaps(&self) -> Result<Value, ClientError> {
        self.get("swaps")
    }

    /// `GET /api/tasks`: a cluster-mode process's tasks.
    pub fn tasks(&self) -> Result<Vec<TaskSnapshot>, ClientError> {
        let tasks = self.get("tasks")?;
        serde_json::from_value(tasks).map_err(|e| ClientError::Refused {
            status: 200,
            message: format!("an answer that is no list of tasks: {e}"),
        })
    }

    /// `GET /api/state/{operator}?key=…`: the state of `key`.
    pub fn state_of(&self, operator: &str, key: &str) -> Result<Value, ClientError> {
        self.get(&format!("state/{operator}?{}", query(&[("key", key)])))
    }

    /// `GET /api/state/{operator}?prefix=…&limit=…`: the state of the
    /// first `limit` keys starting with `prefix`.
    pub fn state_scan(&self, operator: &str, prefix: &str, limit: usize) -> Result<Value, ClientError> {
        let limit = limit.to_string();
        self.get(&format!(
            "state/{operator}?{}",
            query(&[("prefix", prefix), ("limit", &limit)])
        ))
    }

    fn get(&self, what: &str) -> Result<Value, ClientError> {
        self.answer(
            self.agent
                .get(format!("{}/{what}", self.base))
                .header("Authorization", self.bearer())
                .call(),
        )
    }

    /// Uploads `file` as the new plugin of `operator`, as `how` says.
    pub fn swap(
        &self,
        operator: &str,
        file: &std::path::Path,
        how: SwapOptions,
    ) -> Result<Value, ClientError> {
        let bytes = std::fs::read(file).map_err(|source| ClientError::Read {
            path: file.display().to_string(),
            source,
        })?;
        self.upload(operator, &bytes, &file.display().to_string(), how)
    }

    /// Sends `bytes`, the file `file`, as the new plugin of `operator`,
    /// once the pipeline said it takes that many (a server refusing a body
    /// mid-upload would leave only a broken connection to report).
    fn upload(
        &self,
        operator: &str,
        bytes: &[u8],
        file: &str,
        how: SwapOptions,
    ) -> Result<Value, ClientError> {
        let force = how.force.to_string();
        let migrate = if how.migrate_every_key { "eager" } else { "lazy" };
        self.upload_to(
            &format!("operators/{operator}/swap"),
            &[("file", file), ("force", &force), ("migrate", migrate)],
            bytes,
        )
    }

    /// Sends `bytes` to `POST /api/<path>?<query>` (a swap or a shadow),
    /// once the pipeline said it takes that many.
    fn upload_to(&self, path: &str, query: &[(&str, &str)], bytes: &[u8]) -> Result<Value, ClientError> {
        let pipelines = self.pipelines()?;
        if let Some(max) = pipelines[0]["max_plugin_bytes"].as_u64()
            && bytes.len() as u64 > max
        {
            return Err(ClientError::TooLarge {
                size: bytes.len(),
                max,
            });
        }
        self.answer(
            self.agent
                .post(format!("{}/{path}", self.base))
                .query_pairs(query.iter().copied())
                .header("Authorization", self.bearer())
                .header("Content-Type", "application/wasm")
                .send(bytes),
        )
    }

    /// Runs `file` as a `trial` (`shadow` or `canary`) of `operator` on
    /// `share` of the records (a shadow) or of the key groups (a canary).
    pub fn trial(
        &self,
        trial: &str,
        operator: &str,
        file: &std::path::Path,
        share: f64,
    ) -> Result<Value, ClientError> {
        let bytes = std::fs::read(file).map_err(|source| ClientError::Read {
            path: file.display().to_string(),
            source,
        })?;
        let (file, share) = (file.display().to_string(), share.to_string());
        self.upload_to(
            &format!("operators/{operator}/{trial}"),
            &[("file", &file), ("share", &share)],
            &bytes,
        )
    }

    /// Swaps the shadow of `operator` in (`promote`) or ends it (`abort`).
    pub fn end_shadow(&self, operator: &str, how: &str) -> Result<Value, ClientError> {
        self.answer(
            self.agent
                .post(format!("{}/operators/{operator}/{how}", self.base))
                .header("Authorization", self.bearer())
                .send_empty(),
        )
    }

    /// `GET /api/swaps/{id}`.
    pub fn swap_record(&self, id: u64) -> Result<Value, ClientError> {
        self.get(&format!("swaps/{id}"))
    }

    /// Swaps `operator` back to its previous version (of a lower state
    /// version only when `force`).
    pub fn rollback(&self, operator: &str, force: bool) -> Result<Value, ClientError> {
        self.answer(
            self.agent
                .post(format!("{}/operators/{operator}/rollback", self.base))
                .query("force", force.to_string())
                .header("Authorization", self.bearer())
                .send_empty(),
        )
    }

    /// Swaps every plugin operator whose file (as the manifest names it)
    /// differs from what it runs; the swaps made.
    pub fn reload(&self, plan: &Plan) -> Result<Vec<Value>, ClientError> {
        let running = self.operators()?;
        let mut swapped = Vec::new();
        for op in plan.plugin_operators() {
            let (name, plugin) = (op.name, op.plugin);
            let bytes = std::fs::read(plugin.path()).map_err(|source| ClientError::Read {
                path: plugin.path().display().to_string(),
                source,
            })?;
            let digest = hex::encode(Sha256::digest(&bytes));
            let current = running
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o["name"] == name.as_str())
                .and_then(|o| o["plugin"]["digest"].as_str());
            if current.is_some_and(|c| c != digest) {
                swapped.push(self.upload(
                    &name,
                    &bytes,
                    &plugin.path().display().to_string(),
                    SwapOptions::default(),
                )?);
            }
        }
        Ok(swapped)
    }

    /// Opens a tap on `point` (`GET /api/tap/{point}`): its lines as they
    /// come, until `limit` records, the pipeline's end or the reader's
    /// drop; one record in `sample`.
    pub fn tap(
        &self,
        point: &str,
        limit: Option<u64>,
        sample: u64,
    ) -> Result<impl Iterator<Item = Result<TapLine, ClientError>>, ClientError> {
        let mut query = vec![format!("sample={sample}")];
        query.extend(limit.map(|n| format!("limit={n}")));
        // No overall timeout: a tap may follow a pipeline for days.
        let agent = agent(None, self.tls.as_ref());
        let url = format!("{}/tap/{point}?{}", self.base, query.join("&"));
        let response = agent.get(url).header("Authorization", self.bearer()).call();
        let response = self.unreachable(response)?;
        if !response.status().is_success() {
            return Err(refused(response));
        }
        let lines = std::io::BufRead::lines(std::io::BufReader::new(response.into_body().into_reader()));
        let base = self.base.clone();
        Ok(lines
            .filter(|line| line.as_ref().map_or(true, |l| !l.trim().is_empty()))
            .map(move |line| {
                let line = line.map_err(|e| ClientError::Unreachable {
                    addr: base.clone(),
                    reason: format!("the tap's stream broke: {e}"),
                })?;
                serde_json::from_str(&line).map_err(|e| ClientError::Refused {
                    status: 200,
                    message: format!("a tap line that is no JSON ({e}): {line}"),
                })
            }))
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    fn unreachable(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<ureq::http::Response<ureq::Body>, ClientError> {
        response.map_err(|e| ClientError::Unreachable {
            addr: self.base.clone(),
            reason: e.to_string(),
        })
    }

    fn answer(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, ClientError> {
        let mut response = self.unreachable(response)?;
        if !response.status().is_success() {
            return Err(refused(response));
        }
        let text = response.body_mut().read_to_string().unwrap_or_default();
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// An HTTP client answering error statuses as answers, giving up on a
/// connection after 5 s and on a whole request after `global`; its
/// `https` connections trust `tls`.
fn agent(global: Option<std::time::Duration>, tls: Option<&ClientTls>) -> ureq::Agent {
    use ureq::unversioned::resolver::DefaultResolver;
    use ureq::unversioned::transport::{Connector, TcpConnector};
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(std::time::Duration::from_secs(5)))
        .timeout_global(global)
        .build();
    match tls {
        None => config.into(),
        Some(tls) => ureq::Agent::with_parts(
            config,
            ().chain(TcpConnector::default()).chain(tls.connector()),
            DefaultResolver::default(),
        ),
    }
}

/// `pairs` as a URL query.
fn query(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// The error an answer that is no success carries: its JSON `error`, else
/// the body as it came.
fn refused(mut response: ureq::http::Response<ureq::Body>) -> ClientError {
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let message = match body["error"].as_str() {
        Some(e) => e.to_owned(),
        None if text.trim().is_empty() => "(an empty answer)".to_owned(),
        None => text.trim().to_owned(),
    };
    ClientError::Refused { status, message }
}
