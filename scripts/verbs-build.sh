#!/usr/bin/env bash
# Build libibverbs.so.1 from the iwarp-verbs crate: the crate's static
# archive linked by gcc into a shared library with rdma-core's soname and
# symbol versions (verbs/libibverbs.map), so that an unmodified program
# built against Debian's libibverbs loads it. Prints the directory that
# holds it (for LD_LIBRARY_PATH).
#
#   scripts/verbs-build.sh            # release build
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -q -p iwarp-verbs
out="$target/verbs"
mkdir -p "$out"
gcc -shared -o "$out/libibverbs.so.1.tmp" \
    -Wl,--whole-archive "$target/release/libiwarp_verbs.a" -Wl,--no-whole-archive \
    -Wl,--version-script=verbs/libibverbs.map -Wl,-soname,libibverbs.so.1 \
    -Wl,--gc-sections -lpthread -ldl -lm -lc
mv "$out/libibverbs.so.1.tmp" "$out/libibverbs.so.1"
echo "$out"
