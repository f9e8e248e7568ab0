#!/usr/bin/env bash
# The project's test command: formatting, lints, every test, and a short run
# of every fuzz target. Installs what it needs first (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# Everything the tests use, the siw lab (the interop suite fails under CI
# without it) and cargo-fuzz.
scripts/deps.sh --test --lab --fuzz

# A clean build of everything below takes about 5 GB (target/ and fuzz/target/).
echo "== disk free here: $(df -h --output=avail . | tail -1 | tr -d ' ')"

echo "== rustfmt"
cargo fmt --all -- --check
echo "== clippy"
cargo clippy --all-targets -- -D warnings
# The API's backend features (iwarp: xdp, dpdk, memif; all default): each alone
# and neither must build clean.
for f in "" xdp dpdk memif; do
    cargo clippy -p iwarp --no-default-features --features "$f" --all-targets -- -D warnings
done
# The timing marks of iwarp-perf --stages (iwarp-datapath's `stages`, off by
# default) must build clean too.
cargo clippy -p iwarp-bench --features stages --all-targets -- -D warnings
echo "== rustdoc (every intra-doc link resolves)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace -q
echo "== tests"
cargo test --workspace
echo "== the stages' record (iwarp-datapath --features stages)"
cargo test -p iwarp-datapath --features stages --lib stages
cargo test -p iwarp-bench --features stages --test iwarp_perf stages
echo "== the API without backends (over the in-memory link and Context::with_device)"
cargo test -p iwarp --no-default-features
echo "== examples (simulated link, our memif; then AF_XDP and DPDK across two namespaces, and DPDK memif, when root)"
for ex in pingpong pingpong_in_loop remote_read fanout; do
    cargo run --release -q -p iwarp --example "$ex"
    cargo run --release -q -p iwarp --example "$ex" -- --memif
    if [ "$(id -u)" = 0 ]; then
        cargo run --release -q -p iwarp --example "$ex" -- --netns
        if pkg-config --exists libdpdk; then
            cargo run --release -q -p iwarp --example "$ex" -- --dpdk
            cargo run --release -q -p iwarp --example "$ex" -- --dpdk-memif
        elif [ -n "${CI:-}" ]; then
            echo "CI without libdpdk: scripts/deps.sh should have installed it" >&2
            exit 1
        fi
    fi
done
echo "== container image (deploy/test-image.sh: two containers, our stack on each eth0)"
if [ "$(id -u)" = 0 ]; then
    if command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; then
        deploy/test-image.sh
    elif [ -n "${CI:-}" ]; then
        echo "CI without a Docker engine: scripts/deps.sh --test should have installed and started it" >&2
        exit 1
    else
        echo "SKIP: no Docker engine answers (scripts/deps.sh --test installs and starts one)"
    fi
fi
echo "== fuzz targets (build, then ${FUZZ_SECONDS:=10} s each)"
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP lets the stable toolchain take them.
export RUSTC_BOOTSTRAP=1
(cd fuzz && cargo fuzz build)
fuzz_log=$(mktemp)
for t in $(cd fuzz && cargo fuzz list); do
    # Fail on a non-zero status (crash, leak, OOM, timeout, a failed build)
    # and on any artifact libFuzzer left, whatever its kind (crash-, oom-,
    # timeout-, leak-, slow-unit-...), this run's or an earlier one's: each
    # is a finding to look at and then delete.
    status=0
    (cd fuzz && cargo fuzz run "$t" -- -max_total_time="$FUZZ_SECONDS" -print_final_stats=0) >"$fuzz_log" 2>&1 || status=$?
    grep -E "^Done" "$fuzz_log" || true
    artifacts=$(find "fuzz/artifacts/$t" -type f 2>/dev/null | sort | tr '\n' ' ' || true)
    if [ "$status" != 0 ] || [ -n "$artifacts" ]; then
        tail -n 25 "$fuzz_log" >&2
        echo "fuzz target $t failed: cargo fuzz run exited $status; artifacts: ${artifacts:-none}" | cut -c 1-400 >&2
        rm -f "$fuzz_log"
        exit 1
    fi
done
rm -f "$fuzz_log"
echo "== all checks passed"
