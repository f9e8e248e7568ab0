#!/usr/bin/env bash
# A profile-guided release build (PGO): build the stack instrumented, run a
# training load over the per-message paths (latency and bandwidth, MPA/TCP
# and SCTP, the simulated link and our memif, loops and inline polling),
# merge the profile, then build again with it. LLVM then lays the hot
# path out together and keeps the cold branches out of it: on the 2-vCPU
# VM a 64-octet round trip takes 0.85-0.88x the instructions and 0.45-0.53x
# the first-level instruction-cache misses (bench/README.md, "A
# profile-guided build").
#
#   scripts/pgo-build.sh                         # iwarp-perf and stack-cost
#   scripts/pgo-build.sh -p iwarp-verbs          # what to build with the profile
#
# The arguments after the script's name go to the final `cargo build
# --release` (default: `-p iwarp-bench --bin iwarp-perf --bin stack-cost`);
# its output is in target/pgo-release/release/ ($PGO_TARGET_DIR/release/
# where that is set: deploy/build-image.sh with IWARP_PGO=1). Needs rustup's llvm-tools
# component for llvm-profdata (installed here if missing) and, for the
# memif training runs, root (they are left out without it).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/pgo
gen=$root/target/pgo-gen
use=${PGO_TARGET_DIR:-$root/target/pgo-release}
build=("$@")
if [ ${#build[@]} -eq 0 ]; then
    build=(-p iwarp-bench --bin iwarp-perf --bin stack-cost)
fi

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    toolchain=$(rustup show active-toolchain | cut -d' ' -f1)
    rustup component add llvm-tools --toolchain "$toolchain"
fi

rm -rf "$work"
mkdir -p "$work/raw"
echo "== instrumented build ($gen)"
RUSTFLAGS="-Cprofile-generate=$work/raw" CARGO_TARGET_DIR=$gen \
    cargo build --release -p iwarp-bench --bin iwarp-perf --bin stack-cost

echo "== training"
perf=$gen/release/iwarp-perf
train() {
    echo "-- iwarp-perf $*"
    timeout 300 "$perf" "$@" --out "$work/out" | grep -E '^summary' || true
}
# --transport sctp runs each test over MPA/TCP, then over SCTP.
train write_lat -s 64 -n 40000 --sim --busy --transport sctp
train write_lat -s 64 -n 20000 --sim --busy --doorbell --transport sctp
train send_lat -s 64 -n 20000 --sim --busy --transport sctp
train read_lat -s 64 -n 20000 --sim --busy --transport sctp
train write_bw -n 3000 --sim --busy --transport sctp
train write_bw -s 4096 -n 20000 --sim --busy --transport sctp
train write_lat -s 64 -n 20000 --sim --threads --busy --transport sctp
if [ "$(id -u)" = 0 ]; then
    train write_lat -s 64 -n 40000 --link memif --busy --transport sctp
    train write_bw -n 3000 --link memif --busy
fi
# (stack-cost, which bench/README.md judges the build by, is not run here.)

echo "== merge"
"$profdata" merge -o "$work/merged.profdata" "$work"/raw/*.profraw

echo "== build with the profile ($use): cargo build --release ${build[*]}"
RUSTFLAGS="-Cprofile-use=$work/merged.profdata -Cllvm-args=-pgo-warn-missing-function=false" \
    CARGO_TARGET_DIR=$use cargo build --release "${build[@]}"
echo "done: $use/release/"
