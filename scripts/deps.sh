#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks for the demo and the tests.
# Idempotent; needs root for apt (skipped with a note otherwise).
set -euo pipefail

need_apt=()
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
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

if [ "${1:-}" = "--fuzz" ] && ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz@0.13.2
fi
