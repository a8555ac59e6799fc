# The developer's verbs. `just --list` shows them.

set shell := ["bash", "-euo", "pipefail", "-c"]

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", justfile_directory() / "target")

plugin_crates := `ls -d plugins/examples/*/Cargo.toml plugins/fixtures/*/Cargo.toml | xargs -n1 dirname | xargs -n1 basename | tr '\n' ' '`

# List the recipes.
default:
    @just --list

# Install what the recipes need and the machine lacks (see scripts/setup):
# `quickstart`, `build` or `test` (everything).
setup level="test":
    scripts/setup {{ level }}

# Build every plugin in plugins/ to a component in plugins/dist/: the Rust
# ones (wasm32-wasip2), then the Python and JavaScript ones.
plugins: (setup "test") rust-plugins
    scripts/script-plugins

# Build Rust plugins (all of them unless named) to plugins/dist/<name>.wasm.
rust-plugins *crates:
    #!/usr/bin/env bash
    set -euo pipefail
    crates="{{ if crates == "" { plugin_crates } else { crates } }}"
    cargo build --profile plugin --target wasm32-wasip2 $(printf -- '-p %s ' $crates)
    mkdir -p plugins/dist
    for p in $crates; do cp "$CARGO_TARGET_DIR/wasm32-wasip2/plugin/${p//-/_}.wasm" "plugins/dist/$p.wasm"; done

# Build the host binary (release, stripped, every feature).
build: (setup "build")
    cargo build --release -p mailer-cli

# The quickstart: word count of pipelines/data/words.txt, printed to stdout.
# Builds only what it runs: its two plugins and a host without RocksDB.
demo: (setup "quickstart") (rust-plugins "split-words count")
    cargo build --profile quickstart -p mailer-cli --no-default-features
    "$CARGO_TARGET_DIR/quickstart/mailer" run pipelines/quickstart.toml

# The full test suite: unit, plugin and integration tests. Runs them beside
# PostgreSQL and Apache Kafka on loopback (scripts/with-services starts them,
# unless KAFKA_BOOTSTRAP names a broker; Chromium, for the dashboard, comes
# with `plugins`).
test: plugins
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/with-services cargo test --workspace --all-targets
    cargo test --workspace --doc
    (cd guest-sdk/python && python3 -m unittest --quiet)
    node guest-sdk/js/test-mailer-plugin.mjs
    node guest-sdk/js/test-sdk-doc.mjs
    for d in plugins/python/*/; do (cd "$d" && PYTHONPATH=../../../guest-sdk/python python3 -m unittest --quiet); done
    for t in plugins/js/*/test.mjs; do node "$t"; done

# The crash soak: the crash tests with MAILER_SOAK_KILLS=kills (each sweep
# kills its pipeline that many times, or a multiple of it; `just soak 3` is
# a short one), against the Kafka broker, PostgreSQL and S3. Each sweep
# appends a `soak sink=... kills=... lost=... duplicated=...` line to a
# summary file; then the totals per sink kind (scripts/soak-totals), failing
# if anything was lost, or duplicated by an exactly-once sink.
soak kills="100": plugins
    #!/usr/bin/env bash
    set -euo pipefail
    summary=$(mktemp)
    trap 'rm -f "$summary"' EXIT
    status=0
    MAILER_SOAK_SUMMARY="$summary" MAILER_SOAK_KILLS={{ kills }} scripts/with-services \
        cargo test -p mailer-cli --test all -- killed kills_between || status=$?
    scripts/soak-totals "$summary" || status=1
    exit "$status"

# Benchmarks (release builds); `just bench w1` runs those whose name starts with w1.
bench prefix="": plugins
    scripts/with-services cargo bench -p mailer-cli --bench workloads -- {{ prefix }}

# Where a benchmark variant spends its time: a `profiling` build under
# `perf record`, the top functions and each thread's share (scripts/profile).
profile variant top="30": plugins
    scripts/profile {{ variant }} {{ top }}

# Apache Flink 2.3 on the workloads W1–W5 (scripts/bench-flink): its jars
# come from PyPI, its job is bench/flink/, run on a local mini-cluster.
# `just bench-flink w2` runs flink-w2 and flink-w2-rocksdb.
bench-flink prefix="": (setup "bench")
    scripts/bench-flink {{ prefix }}

# mailer against Flink: `just bench w1` to `w5`, then scripts/bench-flink,
# back to back; one ratio line per workload (scripts/compare).
compare: (setup "bench")
    #!/usr/bin/env bash
    set -euo pipefail
    lines=$(mktemp)
    trap 'rm -f "$lines"' EXIT
    for w in w1 w2 w3 w4 w5; do
        {{ just_executable() }} bench "$w" | tee -a "$lines"
    done
    scripts/bench-flink | tee -a "$lines"
    scripts/compare "$lines"

# Build the SDK's API reference (the rustdoc of mailer-sdk and of its
# #[operator] macro) into docs/sdk-api/ (git-ignored); the guide, with
# examples in every SDK language, is docs/sdk.md.
docs: (setup "quickstart")
    #!/usr/bin/env bash
    set -euo pipefail
    cargo doc --no-deps -p mailer-sdk -p mailer-sdk-macros
    rm -rf docs/sdk-api
    mkdir -p docs/sdk-api
    cp -R "$CARGO_TARGET_DIR/doc/." docs/sdk-api/
    printf '<!DOCTYPE html>\n<meta http-equiv="refresh" content="0; url=mailer_sdk/index.html">\n<a href="mailer_sdk/index.html">mailer_sdk</a>\n' > docs/sdk-api/index.html
    echo "docs/sdk-api/mailer_sdk/index.html"

# Formatting, the module graph (imports go down the layers of the module map
# in docs/architecture.md; no cycles) and lints, warnings as errors. Clippy
# checks with the `test` profile, the one `cargo test` builds with: build
# scripts are then the same units, so RocksDB's C++ is compiled
# once for both (under `dev` its build-script run would differ by the
# profile's name alone).
lint: (setup "build")
    scripts/check-module-graph
    cargo fmt --all -- --check
    cargo clippy --profile test --workspace --all-targets -- -D warnings
