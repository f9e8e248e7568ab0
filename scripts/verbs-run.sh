#!/usr/bin/env bash
# Run an unmodified RDMA program on our libibverbs (built if needed): it
# only sets the library path. Configure the device in the environment:
#
#   IWARP_IFACE=veth0 scripts/verbs-run.sh ibv_devinfo
#
# (this slice of issue 25 has device discovery and queries: ibv_devices,
# ibv_devinfo; protection domains, memory, queues and librdmacm follow).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 PROGRAM [ARGS...]" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"
lib="$("$here/scripts/verbs-build.sh")"
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$@"
