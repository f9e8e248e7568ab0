#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks, for what is asked and no more.
# Idempotent; needs root for apt (skipped with a note otherwise).
#
#   scripts/deps.sh [--demo] [--test] [--lab] [--fuzz]
#
#   --demo   what ./demo.sh uses (the default when no option is given):
#            gcc (the linker), tshark (decodes the simulator's capture),
#            iproute2 and ethtool (iwarp-perf demo's namespaces and veths),
#            pkg-config and libdpdk-dev (the DPDK backend: its memif part)
#   --test   what scripts/test.sh's tests use besides: nftables, tcpdump,
#            ping, the rdma-core
#            headers (the siw suite's iwtest.c), libusrsctp-dev (the SCTP
#            interop tests' usrsctp peer), the tools the verbs tests run
#            unmodified on our libraries (ibverbs-utils, perftest,
#            rdmacm-utils, fio, qperf, libfabric-bin), docker.io and debootstrap (the
#            container image test, deploy/test-image.sh); as root it also
#            starts dockerd when no Docker engine answers
#   --lab    the siw interop lab: Debian's 6.1.0-56 kernel image, then
#            interop/lab/lab.sh setup (qemu, rdma-core, perftest, four siw
#            builds under /var/tmp/iwarp-lab). Only scripts/test.sh asks
#            for it; the demo never does.
#   --fuzz   cargo-fuzz from crates.io
#   --bench  the demo's and what bench/README.md's commands use besides:
#            sockperf (the kernel's TCP ping-pong beside ours,
#            bench/scripts/one-cpu-perftest.sh), valgrind (stack-cost's
#            instruction counts, bench/scripts/hot-code.py), linux-perf
#            (profiles)
set -euo pipefail
cd "$(dirname "$0")/.."

demo=0 test=0 lab=0 fuzz=0 bench=0
for a in "$@"; do
    case "$a" in
        --demo) demo=1 ;;
        --test) test=1 ;;
        --lab) lab=1 ;;
        --fuzz) fuzz=1 ;;
        --bench) bench=1 demo=1 ;;
        -h | --help)
            sed -n '2,28s/^# \{0,1\}//p' "$0"
            exit 0
            ;;
        *)
            echo "deps.sh: unknown option $a (try --help)" >&2
            exit 2
            ;;
    esac
done
[ $# -gt 0 ] || demo=1

need_apt=()
if ((demo || test)); then
    command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
    command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
    # Namespaces and veths (iwarp-perf demo as root, the namespace tests);
    # ethtool turns veth checksum offload off.
    command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
    command -v ethtool >/dev/null 2>&1 || need_apt+=(ethtool)
    # The DPDK backend (dpdk/): Debian's DPDK 22.11, found by build.rs
    # through pkg-config (without it the crate builds as a stub). The demo's
    # memif part and the DPDK tests use it.
    command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
    pkg-config --exists libdpdk 2>/dev/null || need_apt+=(libdpdk-dev)
fi
if ((test)); then
    # nftables for random loss, tcpdump for captures, ping for the XDP checks.
    command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
    command -v tcpdump >/dev/null 2>&1 || need_apt+=(tcpdump)
    command -v ping >/dev/null 2>&1 || need_apt+=(iputils-ping)
    # The siw suite builds a small rdma_cm program (interop/guest/iwtest.c) on
    # the host and runs it in the guest, which has the same libraries.
    [ -e /usr/include/rdma/rdma_verbs.h ] || need_apt+=(librdmacm-dev)
    [ -e /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
    # The verbs ABI tests (verbs/tests/abi.rs) run Debian's unmodified
    # ibv_devices and ibv_devinfo on our libibverbs.
    command -v ibv_devinfo >/dev/null 2>&1 || need_apt+=(ibverbs-utils)
    # ... and Debian's unmodified perftest, rping, rdma_server/rdma_client
    # and fio's rdma engine, both ends on our libraries
    # (verbs/tests/tools.rs).
    command -v ib_write_lat >/dev/null 2>&1 || need_apt+=(perftest)
    command -v rping >/dev/null 2>&1 || need_apt+=(rdmacm-utils)
    command -v fio >/dev/null 2>&1 || need_apt+=(fio)
    # qperf's RDMA tests and libfabric's verbs provider (fi_info), also
    # unmodified on our libraries (verbs/tests/tools.rs).
    command -v qperf >/dev/null 2>&1 || need_apt+=(qperf)
    command -v fi_info >/dev/null 2>&1 || need_apt+=(libfabric-bin)
    # usrsctp, the independent SCTP peer of the DDP-over-SCTP interop tests
    # (tests/tests/usrsctp_interop.rs builds interop/sctp/*.c against it).
    [ -e /usr/include/usrsctp.h ] || need_apt+=(libusrsctp-dev)
    # The image test (deploy/test-image.sh): a Docker engine, and debootstrap
    # for a base image where no registry answers.
    command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
fi
if ((bench)); then
    command -v sockperf >/dev/null 2>&1 || need_apt+=(sockperf)
    command -v valgrind >/dev/null 2>&1 || need_apt+=(valgrind)
    command -v perf >/dev/null 2>&1 || need_apt+=(linux-perf)
    command -v objdump >/dev/null 2>&1 || need_apt+=(binutils)
fi
if ((${#need_apt[@]})); then
    if [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
        echo "deps.sh: installing ${need_apt[*]}" >&2
        apt-get update -qq
        apt-get install -y -qq "${need_apt[@]}" >/dev/null
    else
        echo "note: not root; cannot install ${need_apt[*]}" >&2
    fi
fi

# A Docker engine for the image test: start one when none answers (the
# service manager where there is one, else dockerd in the background, log
# in /var/log/iwarp-dockerd.log), and wait for it, bounded.
if ((test)) && [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1 \
    && ! timeout 20 docker info >/dev/null 2>&1; then
    echo "deps.sh: starting dockerd" >&2
    if ! { command -v systemctl >/dev/null 2>&1 && systemctl start docker >/dev/null 2>&1; }; then
        nohup setsid dockerd >/var/log/iwarp-dockerd.log 2>&1 </dev/null &
    fi
    for _ in $(seq 60); do
        timeout 5 docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    timeout 20 docker info >/dev/null 2>&1 \
        || echo "warning: dockerd did not come up (see /var/log/iwarp-dockerd.log)" >&2
fi

# The siw interop lab (interop/lab, tests in interop/tests/siw.rs): qemu
# guests booting Debian's 6.1 kernel with siw built from linux-source-6.1.
# `lab.sh setup` installs its own packages and builds into /var/tmp/iwarp-lab
# (about 3 s once cached); it needs the guest kernel image installed first.
if ((lab)); then
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
fi

if ((fuzz)) && ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz@0.13.2
fi
