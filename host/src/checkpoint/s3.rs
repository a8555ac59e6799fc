//! The S3 client of checkpoints in object storage: `object_store`'s Amazon
//! S3 store, set up from `[checkpoint.s3]` over the usual `AWS_*`
//! environment variables, and a small runtime of its own on which every
//! request runs, so that plain threads (the checkpoint coordinator, a run
//! being restored) can wait for them.

use object_store::aws::AmazonS3Builder;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How to reach S3 or an S3-compatible server (`[checkpoint.s3]`). What is
/// left out comes from the usual environment variables
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION`, `AWS_ENDPOINT`, …). Requests address the bucket in the
/// path (`<endpoint>/<bucket>/<key>`) unless `virtual_hosted_style`.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// The server's URL (`http://` allowed), e.g. an S3-compatible server.
    pub endpoint: Option<String>,
    /// The region (`us-east-1` when neither this nor the environment sets one).
    pub region: Option<String>,
    /// The access key's id.
    pub access_key_id: Option<String>,
    /// The secret access key. Never shown.
    pub secret_access_key: Option<String>,
    /// A session token for temporary credentials. Never shown.
    pub session_token: Option<String>,
    /// Address the bucket as a host name (`<bucket>.<endpoint>`).
    pub virtual_hosted_style: bool,
    /// How long one request may take.
    pub request_timeout: Duration,
    /// Retries of a failed request (with backoff) before it fails.
    pub max_retries: usize,
    /// Files uploaded or downloaded at once.
    pub concurrency: usize,
}

/// How long one request may take, by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries of a failed request, by default.
pub const DEFAULT_MAX_RETRIES: usize = 3;
/// Transfers at once, by default.
pub const DEFAULT_CONCURRENCY: usize = 4;

impl Default for S3Settings {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            virtual_hosted_style: false,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

impl fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let given = |v: &Option<String>| {
            if v.is_some() {
                "<set>"
            } else {
                "<from the environment>"
            }
        };
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &given(&self.access_key_id))
            .field("secret_access_key", &given(&self.secret_access_key))
            .field("session_token", &given(&self.session_token))
            .field("virtual_hosted_style", &self.virtual_hosted_style)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl S3Settings {
    /// A client of `bucket`; why not when the settings do not make one.
    pub fn client(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_virtual_hosted_style_request(self.virtual_hosted_style)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(2),
                    base: 2.0,
                },
                max_retries: self.max_retries,
                retry_timeout: self.request_timeout * (self.max_retries as u32 + 1),
            })
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(self.request_timeout)
                    .with_connect_timeout(self.request_timeout.min(Duration::from_secs(5))),
            );
        if let Some(endpoint) = &self.endpoint {
            builder = builder
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(region) = &self.region {
            builder = builder.with_region(region);
        }
        if let Some(id) = &self.access_key_id {
            builder = builder.with_access_key_id(id);
        }
        if let Some(secret) = &self.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(token) = &self.session_token {
            builder = builder.with_token(token);
        }
        let store = builder
            .build()
            .map_err(|e| format!("cannot set up the S3 client: {e}"))?;
        Ok(Arc::new(store))
    }
}

/// The runtime the S3 requests run on: two threads, started at first use.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mailer-s3")
            .enable_all()
            .build()
            .expect("the S3 client's runtime starts")
    })
}

/// Starts `work` on the S3 runtime without waiting for it (the lease's
/// renewals); its handle, which [`wait_for`] can wait on.
pub(super) fn spawn<F>(work: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime().spawn(work)
}

/// Runs `work` on the S3 runtime and waits for its result, from any thread
/// (inside another runtime too). A panic inside it is an error here, never
/// a panic of the waiting thread.
pub fn wait_for<T, E>(work: impl Future<Output = Result<T, E>> + Send + 'static) -> Result<T, String>
where
    T: Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = runtime().spawn(work);
    runtime().spawn(async move {
        let _ = tx.send(task.await);
    });
    match rx.recv() {
        Ok(Ok(Ok(done))) => Ok(done),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(failed)) => Err(format!("the S3 client failed: {failed}")),
        Err(_) => Err("the S3 client's runtime stopped".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_shown() {
        let s = S3Settings {
            access_key_id: Some("AKIDSECRETID".into()),
            secret_access_key: Some("very-secret".into()),
            endpoint: Some("http://127.0.0.1:9".into()),
            ..S3Settings::default()
        };
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("AKIDSECRETID") && !shown.contains("very-secret"),
            "{shown}"
        );
        assert!(
            shown.contains("<set>") && shown.contains("127.0.0.1:9"),
            "{shown}"
        );
    }

    #[test]
    fn work_waited_for_from_inside_another_runtime_completes_and_a_panic_is_an_error() {
        let other = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let seven = other.block_on(async { wait_for(async { Ok::<_, String>(7) }) });
        assert_eq!(seven, Ok(7));
        let boom = seven.is_ok();
        let failed = wait_for(async move {
            if boom {
                panic!("a bug in the client");
            }
            Ok::<u8, String>(0)
        });
        assert!(failed.unwrap_err().contains("the S3 client failed"));
    }
}
