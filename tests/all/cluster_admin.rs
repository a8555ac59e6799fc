//! Cluster mode's CLI and the members' admin APIs: the CLI finds the
//! members' addresses in their `client.id`s, which anyone joining the
//! consumer group chooses. It sends the admin token only to addresses the
//! manifest lists; a member advertising another is named and skipped.

use crate::cluster_runs::{Member, assert_exact_counts, input_and_output, lines, word_count_with};
use crate::kafka::{bootstrap, produce};
use crate::support::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP listener that records every byte sent to it and answers `401`.
struct Trap {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Trap {
    /// Listens on `ip`, at a free port.
    fn listen(ip: &str) -> Self {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (received, stop) = (received.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut conn, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    conn.set_nonblocking(false).unwrap();
                    conn.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = conn.read(&mut buf) {
                        received.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                    let _ = conn.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
                }
            })
        };
        Self {
            addr,
            received,
            stop,
            thread: Some(thread),
        }
    }

    /// What arrived so far.
    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A consumer of the test's own joining `group` under `client_id`
/// (reading `topic`, as the pipeline's processes do), polled until dropped.
struct Intruder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Intruder {
    fn join(group: &str, client_id: &str, topic: &str) -> Self {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", group)
            .set("client.id", client_id)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", "6000")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&[topic]).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = consumer.poll(Duration::from_millis(100));
                }
                consumer.unsubscribe();
            })
        };
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Intruder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `mailer <args…>` as the operator's CLI of the cluster (the broker's
/// address and the admin token in its environment).
fn cli(args: &[&str]) -> std::process::Output {
    mailer()
        .env("KAFKA_BOOTSTRAP", bootstrap())
        .env("MAILER_INSTANCE", "cli")
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .args(args)
        .output()
        .unwrap()
}

/// `mailer cluster status` of `m` once the group has `members` members,
/// `client_id` among them; fails after 120 s.
fn status_with(m: &Path, members: usize, client_id: &str) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = cli(&["cluster", "status", m.to_str().unwrap()]);
        let text = stdout(&status);
        if text.contains(&format!("{members} member(s)")) && text.contains(client_id) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the group never had {members} members with {client_id}:\n{text}\n{}",
            stderr(&status)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_cli_sends_the_admin_token_only_to_addresses_the_manifest_lists() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-admin-trust");
    // The processes of one machine, each on a free loopback port.
    let admin = "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"${MAILER_ADMIN_TOKEN}\"\n";
    let m = word_count_with(&w, &input, &output, admin);
    let first = lines(0, 200, 30);
    produce(&input, &first);
    let mut a = Member::start(&w, &m, "a");
    let mut b = Member::start(&w, &m, "b");
    assert_exact_counts(&output, &first, &mut [&mut a, &mut b]);

    // A process of the test's own joins the group, its `client.id`
    // advertising a listener of the test at an address the manifest does
    // not list (`[admin] listen` names 127.0.0.1 only).
    let trap = Trap::listen("127.0.0.2");
    let intruder_id = format!("mailer-{input}-intruder@{}", trap.addr);
    let intruder = Intruder::join(&input, &intruder_id, &input);
    let manifest = m.to_str().unwrap();

    let status = status_with(&m, 3, &intruder_id);
    let listed = cli(&["plugin", "list", manifest]);
    let state = cli(&["state", "get", manifest, "counts", "w1"]);
    std::thread::sleep(Duration::from_secs(1));
    let received = trap.received();
    assert!(
        !received.contains(TOKEN),
        "the admin token reached an address the manifest does not list:\n{received}"
    );
    assert!(received.is_empty(), "nothing is sent there at all:\n{received}");

    let (text, warnings) = (stdout(&status), stderr(&status));
    assert!(status.status.success(), "{text}\n{warnings}");
    // Both real members were asked for their tasks.
    assert_eq!(
        text.matches("task(s), 0 restoring").count(),
        2,
        "the real members' tasks:\n{text}\n{warnings}"
    );
    let unlisted = trap.addr.to_string();
    assert!(
        warnings.contains(&unlisted) && warnings.contains("not listed"),
        "a warning names the address skipped:\n{warnings}"
    );

    // `mailer plugin list` asks the real members and names the one skipped.
    let answers: serde_json::Value = serde_json::from_str(&stdout(&listed))
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(&listed), stderr(&listed)));
    let answers = answers.as_object().unwrap();
    assert_eq!(answers.len(), 3, "{answers:?}");
    let real: Vec<_> = answers.iter().filter(|(id, _)| **id != intruder_id).collect();
    assert!(
        real.len() == 2
            && real
                .iter()
                .all(|(_, a)| a["pipelines"][0]["name"] == input.as_str()),
        "the real members answered: {answers:?}\n{}",
        stderr(&listed)
    );
    let skipped = answers[&intruder_id]["error"].as_str().unwrap_or_default();
    assert!(skipped.contains(&unlisted), "{answers:?}");
    assert!(
        !listed.status.success() && stderr(&listed).contains(&unlisted),
        "a process not asked fails the command, named: {}",
        stderr(&listed)
    );

    // A key's live state, from the real member holding its task.
    assert!(state.status.success(), "{}", stderr(&state));
    assert!(stderr(&state).contains(&unlisted), "{}", stderr(&state));
    drop(intruder);
    a.stop();
    b.stop();
}

/// A self-signed certificate for `san` (`IP:127.0.0.1`) and its key, made
/// by `openssl` in the work folder as `<name>.pem` and `<name>.key`.
fn self_signed(w: &Workdir, name: &str, san: &str) -> (String, String) {
    let (cert, key) = (w.path(&format!("{name}.pem")), w.path(&format!("{name}.key")));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={name}"))
        .arg("-addext")
        .arg(format!("subjectAltName={san}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    (cert.display().to_string(), key.display().to_string())
}

#[test]
fn over_tls_the_cli_asks_members_whose_certificate_its_ca_signed() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-admin-tls");
    let (cert, key) = self_signed(&w, "admin", "IP:127.0.0.1");
    let (other, _) = self_signed(&w, "other", "IP:127.0.0.1");
    let admin = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"${{MAILER_ADMIN_TOKEN}}\"\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n"
    );
    let m = word_count_with(&w, &input, &output, &admin);
    let first = lines(0, 100, 30);
    produce(&input, &first);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &first, &mut [&mut a]);

    // Over HTTPS, the certificate checked against `tls_cert` (self-signed).
    let status = status_with(&m, 1, &format!("mailer-{input}-a@127.0.0.1:"));
    let text = stdout(&status);
    assert!(
        text.contains("task(s), 0 restoring"),
        "{text}\n{}",
        stderr(&status)
    );
    let listed = cli(&["plugin", "list", m.to_str().unwrap()]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let answers: serde_json::Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let answer = answers.as_object().unwrap().values().next().unwrap();
    assert_eq!(answer["pipelines"][0]["name"], input.as_str(), "{answers}");

    // The member speaks TLS only: a plain request gets no answer.
    let addr = text
        .split(&format!("mailer-{input}-a@"))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let plain = agent()
        .get(format!("http://{addr}/api/tasks"))
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .call();
    assert!(plain.is_err(), "a plain HTTP answer: {plain:?}");

    // A CLI trusting another CA refuses the member's certificate, before
    // any request (and its token) is sent.
    let mut text = std::fs::read_to_string(&m).unwrap();
    text.push_str(&format!("tls_ca = \"{other}\"\n"));
    let other_ca = w.write("other-ca.toml", &text);
    let refused = cli(&["plugin", "list", other_ca.to_str().unwrap()]);
    assert!(!refused.status.success(), "{}", stdout(&refused));
    assert!(
        stdout(&refused).contains("certificate"),
        "{}\n{}",
        stdout(&refused),
        stderr(&refused)
    );
    a.stop();
}

#[test]
fn an_admin_address_that_is_none_and_half_a_tls_setting_are_refused_at_their_line() {
    let w = Workdir::new();
    let admin = "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"${MAILER_ADMIN_TOKEN}\"\n";
    let cases = [
        (
            "admin_addresses = [\"mailer-1.internal:9464\"]\n",
            "",
            "`mailer-1.internal:9464` is no admin address",
        ),
        (
            "",
            "tls_cert = \"cert.pem\"\n",
            "needs both `tls_cert` and `tls_key`",
        ),
        (
            "",
            "tls_ca = \"ca.pem\"\n",
            "`tls_ca` without `tls_cert` and `tls_key`",
        ),
    ];
    for (i, (cluster, tls, expected)) in cases.into_iter().enumerate() {
        let m = word_count_with(&w, "in", "out", &format!("{cluster}{admin}{tls}"));
        let m = w.write(&format!("case-{i}.toml"), &std::fs::read_to_string(m).unwrap());
        let out = mailer()
            .env("KAFKA_BOOTSTRAP", "127.0.0.1:1")
            .env("MAILER_INSTANCE", "v")
            .env("MAILER_ADMIN_TOKEN", TOKEN)
            .args(["validate", m.to_str().unwrap()])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(
            !out.status.success() && err.contains(expected),
            "{expected}:\n{err}"
        );
        assert!(err.contains(&format!("case-{i}.toml:")), "located: {err}");
    }
}
