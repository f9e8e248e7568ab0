#!/usr/bin/env bash
# The main job, in two parts:
# 1. two simulated iWARP nodes run every operation, every byte is checked, the
#    session is written as a pcap and decoded by Wireshark;
# 2. `iwarp-perf demo`: 64-octet RDMA Write latency and 64 KiB Write bandwidth
#    between two of our stacks, beside Linux TCP on the same link, with
#    ratios, .hgrm, JSON and a PNG plot (AF_XDP across two network namespaces
#    as root; over the simulated link otherwise, and it says so); then the
#    same over memif (our own), shared memory with no kernel in the path
#    (our two ends in one process), beside the same Linux baseline.
#
#   ./demo.sh [PCAP]             # the plain release build
#   IWARP_PGO=1 ./demo.sh        # part 2 on a profile-guided build
#                                # (scripts/pgo-build.sh: ~7 minutes more)
set -euo pipefail
cd "$(dirname "$0")"
# Only what the demo uses (gcc, tshark, iproute2, ethtool, pkg-config and
# libdpdk-dev); never the siw lab.
scripts/deps.sh --demo
out="${1:-$PWD/target/iwarp-sim-demo.pcap}"
mkdir -p "$(dirname "$out")"
cargo run --quiet --release -p iwarp-sim -- demo --out "$out"
echo
if [ "${IWARP_PGO:-0}" = 1 ]; then
    scripts/pgo-build.sh -q -p iwarp-bench --bin iwarp-perf
    perf=(target/pgo-release/release/iwarp-perf)
    echo "(iwarp-perf built profile-guided: target/pgo-release/release/iwarp-perf)"
else
    cargo build --quiet --release -p iwarp-bench --bin iwarp-perf
    perf=(target/release/iwarp-perf)
fi
"${perf[@]}" demo --out "$PWD/target/iwarp-perf"
echo
"${perf[@]}" demo --link memif --out "$PWD/target/iwarp-perf/memif"
