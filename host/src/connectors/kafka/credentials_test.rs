//! A wrong SASL password is a clear error naming the brokers and the topic.
//!
//! The tests' broker (noida-db) takes any SASL credentials, so here a
//! minimal stand-in speaks just enough of the Kafka protocol to refuse them
//! the way a broker does: it answers ApiVersions, offers PLAIN in
//! SaslHandshake, and fails SaslAuthenticate with
//! SASL_AUTHENTICATION_FAILED (58).

use super::config::{KafkaSinkSpec, KafkaSourceSpec};
use super::{KafkaSink, KafkaSource};
use crate::operators::FailureHandler;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

const REFUSAL: &str = "Authentication failed: invalid credentials for user alice";

/// Starts the stand-in on a free loopback port; its `host:port`.
fn refusing_broker() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = serve(stream);
            });
        }
    });
    addr
}

fn serve(mut s: TcpStream) -> std::io::Result<()> {
    loop {
        let mut size = [0u8; 4];
        s.read_exact(&mut size)?;
        let mut req = vec![0u8; u32::from_be_bytes(size) as usize];
        s.read_exact(&mut req)?;
        let api_key = i16::from_be_bytes([req[0], req[1]]);
        let correlation = &req[4..8];
        let mut body = Vec::new();
        match api_key {
            // ApiVersions v3 (flexible): error 0, the three APIs we speak.
            18 => {
                body.extend(0i16.to_be_bytes());
                body.push(4); // compact array of 3
                for (key, max) in [(18i16, 3i16), (17, 1), (36, 0)] {
                    body.extend(key.to_be_bytes());
                    body.extend(0i16.to_be_bytes());
                    body.extend(max.to_be_bytes());
                    body.push(0); // no tagged fields
                }
                body.extend(0i32.to_be_bytes()); // throttle
                body.push(0);
            }
            // SaslHandshake v1: error 0, mechanisms ["PLAIN"].
            17 => {
                body.extend(0i16.to_be_bytes());
                body.extend(1i32.to_be_bytes());
                body.extend(5i16.to_be_bytes());
                body.extend(b"PLAIN");
            }
            // SaslAuthenticate v0: refused.
            36 => {
                body.extend(58i16.to_be_bytes());
                body.extend((REFUSAL.len() as i16).to_be_bytes());
                body.extend(REFUSAL.as_bytes());
                body.extend(0i32.to_be_bytes()); // no auth bytes
            }
            _ => return Ok(()),
        }
        let len = (4 + body.len()) as u32;
        s.write_all(&len.to_be_bytes())?;
        s.write_all(correlation)?;
        s.write_all(&body)?;
    }
}

fn security() -> String {
    r#"security = { protocol = "sasl_plaintext", sasl_mechanism = "PLAIN", username = "alice", password = "wrong-Pa55word" }"#
        .to_owned()
}

fn rejects() -> FailureHandler {
    FailureHandler::new("test", Default::default(), None, Default::default())
}

#[test]
fn a_wrong_password_names_the_brokers_the_topic_and_the_refusal() {
    let brokers = refusing_broker();
    let source: KafkaSourceSpec = toml::from_str(&format!(
        "bootstrap_servers = \"{brokers}\"\ntopics = [\"orders\"]\ngroup_id = \"g\"\n{}",
        security()
    ))
    .unwrap();
    let err = KafkaSource::open(&source, rejects())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains(&format!("brokers `{brokers}`")), "{err}");
    assert!(err.contains("topic `orders`"), "{err}");
    assert!(err.contains("the brokers refused the credentials"), "{err}");
    assert!(!err.contains("wrong-Pa55word"), "{err}");

    let sink: KafkaSinkSpec = toml::from_str(&format!(
        "bootstrap_servers = \"{brokers}\"\ntopic = \"totals\"\n{}",
        security()
    ))
    .unwrap();
    let err = KafkaSink::open(&sink, rejects())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("topic `totals`"), "{err}");
    assert!(err.contains("the brokers refused the credentials"), "{err}");
    assert!(err.contains(REFUSAL), "the broker's own words: {err}");
}
