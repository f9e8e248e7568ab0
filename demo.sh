#!/usr/bin/env bash
# The main job: run two simulated iWARP nodes through every operation, check
# every byte, write the session as a pcap and decode it with Wireshark.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
out="${1:-$PWD/target/iwarp-sim-demo.pcap}"
mkdir -p "$(dirname "$out")"
cargo run --quiet --release -p iwarp-sim -- demo --out "$out"
