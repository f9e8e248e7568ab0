#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks for the demo and the tests.
# Idempotent; needs root for apt (skipped with a note otherwise).
set -euo pipefail

need_apt=()
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
# Namespace tests (AF_XDP against Linux TCP, two stacks over veth): iproute2
# for namespaces and veths, ethtool to turn veth checksum offload off,
# nftables for random loss, tcpdump for captures, ping for the XDP checks.
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v ethtool >/dev/null 2>&1 || need_apt+=(ethtool)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
command -v tcpdump >/dev/null 2>&1 || need_apt+=(tcpdump)
command -v ping >/dev/null 2>&1 || need_apt+=(iputils-ping)
# The siw suite builds a small rdma_cm program (interop/guest/iwtest.c) on
# the host and runs it in the guest, which has the same libraries.
[ -e /usr/include/rdma/rdma_verbs.h ] || need_apt+=(librdmacm-dev)
[ -e /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
# The DPDK backend (dpdk/): Debian's DPDK 22.11, found by build.rs through
# pkg-config (without it the crate builds as a stub).
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
pkg-config --exists libdpdk 2>/dev/null || need_apt+=(libdpdk-dev)
if ((${#need_apt[@]})); then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
        apt-get update -qq
        apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "note: not root; cannot install ${need_apt[*]}" >&2
    fi
fi

# The siw interop lab (interop/lab, tests in interop/tests/siw.rs): qemu
# guests booting Debian's 6.1 kernel with siw built from linux-source-6.1.
# `lab.sh setup` installs its own packages and builds into /var/tmp/iwarp-lab
# (about 3 s once cached); it needs the guest kernel image installed first.
if [ "$(id -u)" = 0 ]; then
    if [ ! -e /boot/vmlinuz-6.1.0-56-amd64 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends linux-image-6.1.0-56-amd64 >/dev/null
    fi
    # A failed setup is reported by the interop suite, which names what is missing.
    interop/lab/lab.sh setup >/tmp/iwarp-lab-setup.log 2>&1 \
        || echo "warning: siw lab setup failed (see /tmp/iwarp-lab-setup.log)" >&2
else
    echo "note: not root; the siw interop lab is not set up" >&2
fi

if [ "${1:-}" = "--fuzz" ] && ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz@0.13.2
fi
