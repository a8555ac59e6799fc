# The developer's verbs. `just --list` shows them.

set shell := ["bash", "-euo", "pipefail", "-c"]

export CARGO_TARGET_DIR := env_var_or_default("CARGO_TARGET_DIR", justfile_directory() / "target")

plugin_crates := `ls -d plugins/*/Cargo.toml | xargs -n1 dirname | xargs -n1 basename | tr '\n' ' '`

# List the recipes.
default:
    @just --list

# Build every plugin in plugins/ to a component in plugins/dist/: the Rust
# ones (wasm32-wasip2), then the Python and JavaScript ones.
plugins:
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
    cargo build --profile plugin --target wasm32-wasip2 {{ prepend("-p ", plugin_crates) }}
    mkdir -p plugins/dist
    for p in {{ plugin_crates }}; do cp "$CARGO_TARGET_DIR/wasm32-wasip2/plugin/${p//-/_}.wasm" "plugins/dist/$p.wasm"; done
    scripts/script-plugins

# Build the host binary (release).
build:
    cargo build --release -p mailer

# The quickstart: word count of pipelines/data/words.txt, printed to stdout.
demo: plugins build
    "$CARGO_TARGET_DIR/release/mailer" run pipelines/quickstart.toml

# The full test suite: unit, plugin and integration tests. Makes sure the
# machine's PostgreSQL runs and Chromium is installed (for the dashboard),
# and starts a Kafka broker on loopback for them (unless KAFKA_BOOTSTRAP
# names one) and stops it.
test: plugins
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/postgres-ready
    scripts/chromium-ready
    if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
        data=$(scripts/kafka-broker start)
        trap 'scripts/kafka-broker stop "${data:-}"' EXIT
        export KAFKA_BOOTSTRAP=127.0.0.1:19092
    fi
    cargo test --workspace --all-targets
    cargo test --workspace --doc
    (cd guest-sdk/python && python3 -m unittest --quiet)
    node guest-sdk/js/test-mailer-plugin.mjs

# The crash tests with 100 SIGKILLs per state backend (200 in all), and 200
# against the Kafka broker (exactly once) and 100 more (at least once).
soak: plugins
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/postgres-ready
    if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
        data=$(scripts/kafka-broker start)
        trap 'scripts/kafka-broker stop "${data:-}"' EXIT
        export KAFKA_BOOTSTRAP=127.0.0.1:19092
    fi
    MAILER_SOAK_KILLS=100 cargo test -p mailer --test all killed

# Benchmarks (release builds); `just bench w1` runs those whose name starts with w1.
bench prefix="": plugins
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/postgres-ready
    if [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
        data=$(scripts/kafka-broker start)
        trap 'scripts/kafka-broker stop "${data:-}"' EXIT
        export KAFKA_BOOTSTRAP=127.0.0.1:19092
    fi
    cargo bench -p mailer --bench workloads -- {{ prefix }}

# Formatting and lints, warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
