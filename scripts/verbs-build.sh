#!/usr/bin/env bash
# Build libibverbs.so.1 and librdmacm.so.1 from the iwarp-verbs crate: the
# crate's static archive linked by gcc into a shared library with
# rdma-core's soname and symbol versions (verbs/libibverbs.map), and a
# small librdmacm.so.1 that defines librdmacm's version names and needs
# it (verbs/librdmacm.map), so that an unmodified program built against
# Debian's libibverbs and librdmacm loads them. Prints the directory that
# holds them (for LD_LIBRARY_PATH).
#
#   scripts/verbs-build.sh            # release build
#   IWARP_PGO=1 scripts/verbs-build.sh   # profile-guided (scripts/pgo-build.sh,
#                                        # into target/pgo-verbs; ~7 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ "${IWARP_PGO:-0}" = 1 ]; then
    target="$PWD/target/pgo-verbs"
    PGO_TARGET_DIR="$target" scripts/pgo-build.sh -q -p iwarp-verbs >&2
else
    cargo build --release -q -p iwarp-verbs
fi
out="$target/verbs"
mkdir -p "$out"
# One link at a time: tests (and programs) run this script concurrently,
# and a second link's temporary file must not be moved by the first.
exec 9>"$out/.build.lock"
flock 9
# The stack links the DPDK shim (the iwarp crate opens DPDK contexts too):
# DPDK's shared libraries where the machine has them.
dpdk_libs="$(pkg-config --libs libdpdk 2>/dev/null || true)"
gcc -shared -o "$out/libibverbs.so.1.tmp" \
    -Wl,--whole-archive "$target/release/libiwarp_verbs.a" -Wl,--no-whole-archive \
    -Wl,--version-script=verbs/libibverbs.map -Wl,-soname,libibverbs.so.1 \
    -Wl,--gc-sections -Wl,--as-needed $dpdk_libs -lpthread -ldl -lm -lc -lgcc_s
mv "$out/libibverbs.so.1.tmp" "$out/libibverbs.so.1"
printf 'int iwarp_rdmacm_1_0;\nint iwarp_rdmacm_1_2;\n' > "$out/rdmacm-versions.c"
gcc -shared -fPIC -o "$out/librdmacm.so.1.tmp" "$out/rdmacm-versions.c" \
    -Wl,--version-script=verbs/librdmacm.map -Wl,-soname,librdmacm.so.1 \
    -Wl,--no-as-needed -L"$out" -l:libibverbs.so.1
mv "$out/librdmacm.so.1.tmp" "$out/librdmacm.so.1"
echo "$out"
