//! The benchmark workloads W1 to W5 (`docs/workloads.md`) and the state
//! backend micro-benchmarks, each variant in its own process so that its
//! peak RSS is its own.
//!
//! `cargo bench -p mailer-cli --bench workloads -- [name-prefix]` (or `just bench
//! [prefix]`; the plugins must be built). `MAILER_BENCH_RECORDS` overrides N.
//! Each variant prints `bench <name> records=<n> secs=<s> rec_per_s=<r> …`.

mod cluster;
mod common;
mod kafka;
mod plugin_lang;
mod postgres;
mod s3;
mod sandbox;
mod state;
mod swap;
mod w1;
mod w2;
mod w3;
mod w4;
mod w5;

fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v = Vec::new();
    v.extend(w1::variants());
    v.extend(w2::variants());
    v.extend(w3::variants());
    v.extend(w4::variants());
    v.extend(w5::variants());
    v.extend(state::variants());
    v.extend(s3::variants());
    v.extend(kafka::variants());
    v.extend(cluster::variants());
    v.extend(postgres::variants());
    v.extend(swap::variants());
    v.extend(sandbox::variants());
    v.extend(plugin_lang::variants());
    v
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--variant") {
        let name = &args[i + 1];
        let (_, run) = variants()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("unknown variant {name}"));
        run();
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("workloads: benchmarks; run them with `just bench` or `cargo bench`");
        return;
    }
    let prefix = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_default();
    let mut lines = Vec::new();
    for (name, _) in variants().into_iter().filter(|(n, _)| n.starts_with(&prefix)) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--variant", &name])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{text}");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        lines.push(text);
    }
    for ratio in common::ratios(&lines) {
        println!("{ratio}");
    }
}
