//! The broker's SASL/SCRAM and TLS listeners (`scripts/kafka-broker start`):
//! the right credentials and CA are accepted, and a wrong password or an
//! unknown CA is a clear error naming the brokers and the topic, never the
//! password.

use crate::kafka::{assert_counts_once, consume_all, records, topics};
use crate::support::*;
use mailer_test_support::kafka::{sasl_bootstrap, tls_bootstrap};

/// A Kafka -> keyed count -> Kafka pipeline whose source reads over SASL
/// (`source_security`) and whose sink writes over TLS (`sink_security`).
fn secured(
    w: &Workdir,
    input: &str,
    output: &str,
    source_security: &str,
    sink_security: &str,
) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "secured"

[source]
type = "kafka"
bootstrap_servers = "{sasl}"
topics = ["{input}"]
group_id = "{input}"
format = "string"
bounded = true
security = {source_security}

{KEYED_COUNT}
[sink]
type = "kafka"
bootstrap_servers = "{tls}"
topic = "{output}"
exactly_once = true
security = {sink_security}

[checkpoint]
interval = "200ms"
path = "checkpoints"
"#,
        sasl = sasl_bootstrap(),
        tls = tls_bootstrap(),
    ))
}

const SCRAM: &str = r#"{ protocol = "sasl_plaintext", sasl_mechanism = "SCRAM-SHA-512", username = "${KAFKA_SASL_USERNAME}", password = "${KAFKA_SASL_PASSWORD}" }"#;
const WRONG_PASSWORD: &str = r#"{ protocol = "sasl_plaintext", sasl_mechanism = "SCRAM-SHA-256", username = "${KAFKA_SASL_USERNAME}", password = "wrong-Pa55word" }"#;
const KNOWN_CA: &str = r#"{ protocol = "ssl", ca_location = "${KAFKA_TLS_CA}" }"#;
/// The system's roots: none of them signed the broker's certificate.
const UNKNOWN_CA: &str = r#"{ protocol = "ssl" }"#;

#[test]
fn scram_credentials_and_the_brokers_ca_are_accepted() {
    let (input, output) = topics("secured", 2, &records(4, 50));
    let w = Workdir::new();
    run_to_end(&secured(&w, &input, &output, SCRAM, KNOWN_CA), &[]);
    // One count per input record, once each.
    assert_counts_once(&consume_all(&output, 1), 4, 50, "");
}

#[test]
fn a_wrong_password_is_refused_by_name_without_the_password() {
    let (input, output) = topics("wrong-password", 1, &records(1, 1));
    let w = Workdir::new();
    let out = run(&[
        "run",
        secured(&w, &input, &output, WRONG_PASSWORD, KNOWN_CA)
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(&format!("brokers `{}`", sasl_bootstrap())), "{err}");
    assert!(err.contains(&format!("topic `{input}`")), "{err}");
    assert!(err.contains("the brokers refused the credentials"), "{err}");
    assert!(
        !err.contains("wrong-Pa55word"),
        "the password is never shown: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(consume_all(&output, 1).is_empty());
}

#[test]
fn a_broker_certificate_no_known_ca_signed_is_refused_by_name() {
    let (input, output) = topics("unknown-ca", 1, &records(1, 1));
    let w = Workdir::new();
    let out = run(&[
        "run",
        secured(&w, &input, &output, SCRAM, UNKNOWN_CA).to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(&format!("brokers `{}`", tls_bootstrap())), "{err}");
    assert!(err.contains(&format!("topic `{output}`")), "{err}");
    assert!(err.contains("certificate verify failed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(consume_all(&output, 1).is_empty());
}
