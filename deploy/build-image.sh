#!/usr/bin/env bash
# Build the container image `iwarp-rs` (deploy/Dockerfile). Idempotent.
#
#   deploy/build-image.sh            # image iwarp-rs:latest
#   IWARP_PGO=1 deploy/build-image.sh   # its binaries built profile-guided
#                                       # (scripts/pgo-build.sh: ~7 more minutes)
#
# 1. Base image: $IWARP_BASE (default iwarp-base:bookworm) if present; else
#    debian:bookworm-slim from a registry if one answers within 30 s; else a
#    Debian 12 minbase made with debootstrap and `docker import`ed (~20 s
#    plus the download; needs root and the Debian mirror).
# 2. Binaries: iwarp-perf, tlnc, iwarp-serve, iwarp-sim in release mode, in their own
#    target directory (target/image), so that this build does not rebuild
#    the tests' target/ and back; with DPDK where the host has libdpdk-dev
#    (for the memif link between containers), as its stub otherwise.
# 3. A build context (target/image-context): the Dockerfile, setcap, four stripped
#    binaries and, with DPDK, dpdk/ — the DPDK libraries the binaries link
#    (and theirs) and the three drivers a memif link needs (bus_vdev,
#    mempool_ring, net_memif), copied from the host's Debian 12; then
#    `docker build`.
#
# Needs a running Docker engine (see deploy/README.md to start one).
set -euo pipefail
cd "$(dirname "$0")/.."

image="${IWARP_IMAGE:-iwarp-rs}"
base="${IWARP_BASE:-iwarp-base:bookworm}"

command -v docker >/dev/null || { echo "build-image: docker not installed (apt-get install docker.io)" >&2; exit 2; }
timeout 20 docker info >/dev/null 2>&1 || { echo "build-image: no Docker engine answers (start dockerd)" >&2; exit 2; }

if ! docker image inspect "$base" >/dev/null 2>&1; then
    if timeout 30 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
        docker tag debian:bookworm-slim "$base"
        echo "build-image: base $base = debian:bookworm-slim from the registry"
    else
        [ "$(id -u)" = 0 ] || { echo "build-image: no registry; debootstrap needs root" >&2; exit 2; }
        command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
        root="$(mktemp -d /var/tmp/iwarp-base.XXXXXX)"
        trap 'rm -rf "$root"' EXIT
        echo "build-image: no registry; debootstrap --variant=minbase bookworm (log: /tmp/iwarp-debootstrap.log)"
        timeout 900 debootstrap --variant=minbase bookworm "$root" >/tmp/iwarp-debootstrap.log 2>&1
        rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
        tar -C "$root" -c . | docker import - "$base" >/dev/null
        rm -rf "$root"
        trap - EXIT
        echo "build-image: base $base imported"
    fi
fi

bins=(iwarp-perf tlnc iwarp-serve iwarp-sim)
export CARGO_TARGET_DIR="$PWD/target/image"
# No debug info: it is stripped from the image anyway, and generating it
# is a good part of the build's time on a small machine.
export CARGO_PROFILE_RELEASE_DEBUG=0
build=(--locked -p iwarp-bench --bin iwarp-perf -p iwarp-tools --bin tlnc --bin iwarp-serve -p iwarp-sim --bin iwarp-sim)
if [ "${IWARP_PGO:-0}" = 1 ]; then
    export PGO_TARGET_DIR="$PWD/target/image-pgo"
    scripts/pgo-build.sh "${build[@]}"
    export CARGO_TARGET_DIR="$PGO_TARGET_DIR"
else
    cargo build --release "${build[@]}"
fi

ctx="$PWD/target/image-context"
rm -rf "$ctx"
mkdir -p "$ctx"
cp deploy/Dockerfile "$ctx/"
for b in "${bins[@]}"; do
    objcopy --strip-debug "$CARGO_TARGET_DIR/release/$b" "$ctx/$b"
done
# The host's setcap, for the Dockerfile's file capabilities (the base has
# libcap, which it links, but not the tool); not kept in the image.
command -v setcap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libcap2-bin >/dev/null
cp "$(command -v setcap)" "$ctx/setcap"
# DPDK's shared libraries and the memif drivers, from the host (the base is
# the same Debian 12); an empty dpdk/ when the binaries were built without.
mkdir -p "$ctx/dpdk/lib" "$ctx/dpdk/pmds"
touch "$ctx/dpdk/.keep"
# Not `ldd | grep -q`: grep -q stops at the first match, ldd may then die of
# SIGPIPE and pipefail turns the pipeline false (CI saw this once).
if grep -q librte_eal <<<"$(ldd "$ctx/iwarp-perf")"; then
    pmds=/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0
    for d in librte_bus_vdev librte_mempool_ring librte_net_memif; do
        cp -L "$pmds/$d.so.23" "$ctx/dpdk/pmds/$d.so.23.0"
    done
    # Every library the binaries and drivers need that the base lacks
    # (libc and friends are in it).
    { ldd "$ctx/iwarp-perf"; for f in "$ctx"/dpdk/pmds/*; do ldd "$f"; done; } \
        | awk '/=>/ { print $3 }' | sort -u \
        | grep -v -E '/(libc|libm|libgcc_s|libpthread|libdl|librt)\.so' \
        | while read -r l; do cp -L "$l" "$ctx/dpdk/lib/"; done
fi
# The context is the Dockerfile, the binaries and setcap, nothing else (about 11 MB):
# a stray file or an unstripped binary would show here, not in the image.
ctx_files=$(find "$ctx" -maxdepth 1 -type f | wc -l)
ctx_kib=$(du -sk "$ctx" | cut -f1)
if [ "$ctx_files" != $((${#bins[@]} + 2)) ] || [ "$ctx_kib" -gt 65536 ]; then
    echo "build-image: the build context ($ctx) holds $ctx_files files at its top, $ctx_kib KiB: expected ${#bins[@]} binaries, setcap and the Dockerfile (and dpdk/), under 64 MiB" >&2
    exit 1
fi
docker build -q --build-arg BASE="$base" -t "$image" "$ctx" >/dev/null
echo "build-image: built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}'); build context $ctx_files files, $((ctx_kib / 1024)) MiB)"
