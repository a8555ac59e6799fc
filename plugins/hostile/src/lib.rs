//! Test plugin (map) for the sandbox: each record's value says how to
//! misbehave; any other value passes through unchanged.
//!
//! | value | what it does |
//! |---|---|
//! | `loop` | spins forever (the call deadline must stop it) |
//! | `bomb` | allocates until memory runs out (the memory limit must stop it) |
//! | `stack` | recurses until the stack overflows |
//! | `leak` | keeps 1 MiB more on every call, across calls |
//! | `panic` | panics |
//! | `print` | writes a line to stdout and one to stderr |
//! | `log` | logs a warning through the `log` import |
//! | `log-flood` | logs 10 000 lines through the `log` import in one call |
//! | `file:<path>` | reads the file; the value becomes `read:<bytes>` or `denied:<error>` |
//! | `write:<path>` | writes the file; `wrote` or `denied:<error>` |
//! | `env:<NAME>` | reads the variable; `env:<value>` or `denied` |
//! | `socket:<addr>` | connects over TCP; `connected` or `denied:<error>` |
//! | `clock` | reads the wall clock; `clock:<seconds since 1970>` |
//! | `random` | reads 8 random bytes; `random:<hex>` |

use mailer_sdk::{Record, Result, operator};
use std::sync::Mutex;

/// What `leak` keeps.
static LEAKED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Misbehaves as asked.
#[operator(map)]
fn hostile(mut rec: Record) -> Result<Record> {
    let value = String::from_utf8_lossy(&rec.value).into_owned();
    let answer = match value.split_once(':') {
        Some(("file", path)) => match std::fs::read(path) {
            Ok(bytes) => format!("read:{}", bytes.len()),
            Err(e) => format!("denied:{e}"),
        },
        Some(("write", path)) => match std::fs::write(path, b"hostile") {
            Ok(()) => "wrote".to_owned(),
            Err(e) => format!("denied:{e}"),
        },
        Some(("env", name)) => match std::env::var(name) {
            Ok(v) => format!("env:{v}"),
            Err(_) => "denied".to_owned(),
        },
        Some(("socket", addr)) => match std::net::TcpStream::connect(addr) {
            Ok(_) => "connected".to_owned(),
            Err(e) => format!("denied:{e}"),
        },
        _ => match value.as_str() {
            "loop" => spin(),
            "bomb" => bomb(),
            "stack" => format!("depth:{}", recurse([0; 64])),
            "leak" => {
                let mut leaked = LEAKED.lock().expect("leak lock");
                leaked.push(vec![1u8; 1 << 20]);
                format!("leaked:{}", leaked.len())
            }
            "panic" => panic!("hostile: asked to panic"),
            "print" => {
                println!("hostile says hello on stdout");
                eprintln!("hostile says hello on stderr");
                "printed".to_owned()
            }
            "log" => {
                mailer_sdk::log::warn("hostile warns through the log import");
                "logged".to_owned()
            }
            "log-flood" => {
                for i in 0..10_000 {
                    mailer_sdk::log::info(format!("hostile floods the log, line {i}"));
                }
                "flooded".to_owned()
            }
            "clock" => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                format!("clock:{now}")
            }
            "random" => {
                let mut bytes = [0u8; 8];
                random(&mut bytes);
                format!(
                    "random:{}",
                    bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
                )
            }
            _ => return Ok(rec),
        },
    };
    rec.value = answer.into_bytes();
    Ok(rec)
}

fn spin() -> String {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn bomb() -> String {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![7u8; 16 << 20]);
        std::hint::black_box(&hoard);
    }
}

#[allow(unconditional_recursion)]
fn recurse(pad: [u8; 64]) -> u64 {
    let pad = std::hint::black_box(pad);
    1 + recurse(pad) + u64::from(pad[0])
}

/// Random bytes from the standard library's hasher seeds (WASI `random`).
fn random(out: &mut [u8; 8]) {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    *out = h.finish().to_le_bytes();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_ordinary_records_and_answers_probes() {
        assert_eq!(hostile(Record::new("fine")).unwrap().value, b"fine");
        let missing = hostile(Record::new("file:/no/such/file")).unwrap();
        assert!(missing.value.starts_with(b"denied:"));
        assert_eq!(hostile(Record::new("leak")).unwrap().value, b"leaked:1");
    }
}
