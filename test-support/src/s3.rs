//! An S3-compatible server on loopback for tests and benchmarks: moto's
//! server (PyPI `moto[server]`), which `scripts/setup test` installs into
//! `$MAILER_TOOLS/s3` (`scripts/s3-test-server`). Each [`S3Server`] is a
//! process of its own with its buckets in memory, stopped when dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The access key the tests' manifests give (moto accepts any).
pub const ACCESS_KEY_ID: &str = "mailer-test";
/// The secret key the tests' manifests give.
pub const SECRET_ACCESS_KEY: &str = "mailer-test-secret";

/// The server program: `$MAILER_S3_SERVER`, else moto's server in the
/// folder `scripts/s3-test-server install` puts it in.
fn program() -> PathBuf {
    if let Some(p) = std::env::var_os("MAILER_S3_SERVER") {
        return PathBuf::from(p);
    }
    let tools = std::env::var_os("MAILER_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/mailer-tools")
        });
    tools.join("s3/bin/moto_server")
}

/// A running S3-compatible server.
pub struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    /// Starts a server on a free loopback port with the bucket `bucket`;
    /// fails with what to run when the server is not installed.
    pub fn start(bucket: &str) -> Self {
        let program = program();
        assert!(
            program.is_file(),
            "no S3 test server at `{}`: run `scripts/setup test` (it installs moto's server)",
            program.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", program.display()));
        let mut server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Another process may have taken the port: this server is gone.
            if let Some(status) = server.child.try_wait().expect("the server's status") {
                panic!("the S3 test server exited at start ({status}): is port {port} taken?");
            }
            if let Ok(r) = agent()
                .put(&format!("{}/{bucket}", server.endpoint()))
                .send_empty()
                && r.status().is_success()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the S3 test server did not start within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// Its URL, for `[checkpoint.s3] endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `[checkpoint.s3]` table reaching it.
    pub fn manifest_table(&self) -> String {
        format!(
            "[checkpoint.s3]\nendpoint = \"{}\"\nregion = \"us-east-1\"\naccess_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key = \"{SECRET_ACCESS_KEY}\"\n",
            self.endpoint()
        )
    }

    /// Keeps every version of each object of `bucket` from now on.
    pub fn enable_versioning(&self, bucket: &str) {
        let body = r#"<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>"#;
        let r = agent()
            .put(&format!("{}/{bucket}?versioning", self.endpoint()))
            .send(body)
            .expect("the S3 test server answers");
        assert!(r.status().is_success(), "versioning not enabled: {}", r.status());
    }

    /// The number of versions of each object of `bucket` under `prefix`
    /// (deletions not counted): with versioning on, how many times each
    /// was written.
    pub fn versions(&self, bucket: &str, prefix: &str) -> BTreeMap<String, usize> {
        let mut r = agent()
            .get(&format!(
                "{}/{bucket}?versions&prefix={prefix}&max-keys=1000",
                self.endpoint()
            ))
            .call()
            .expect("the S3 test server answers");
        let xml = r.body_mut().read_to_string().expect("a listing");
        assert!(
            !xml.contains("<IsTruncated>true</IsTruncated>"),
            "more than 1000 versions"
        );
        let mut versions = BTreeMap::new();
        for version in xml.split("<Version>").skip(1) {
            let key = version
                .split_once("<Key>")
                .and_then(|(_, rest)| rest.split_once("</Key>"))
                .map(|(key, _)| key.to_owned())
                .expect("a version names its key");
            *versions.entry(key).or_insert(0) += 1;
        }
        versions
    }

    /// Freezes the server (SIGSTOP): it accepts connections and answers
    /// nothing, as a server that stopped does.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child process.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
