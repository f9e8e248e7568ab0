#!/usr/bin/env bash
# Run an unmodified RDMA program on our libibverbs and librdmacm (built if
# needed): it only sets the library path. Configure the device in the
# environment (verbs/src/engine.rs lists the variables):
#
#   IWARP_IFACE=veth0 IWARP_IP=10.0.0.1/24 scripts/verbs-run.sh ib_send_lat -R
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"
lib="$("$here/scripts/verbs-build.sh")"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
