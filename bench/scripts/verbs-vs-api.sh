#!/usr/bin/env bash
# What the C library adds: Debian's unmodified ib_send_lat / ib_read_lat
# on our libibverbs and librdmacm against iwarp-perf's perftest mode (the
# Rust API, the same test) on the same link, alternated ROUNDS times in
# one run: two namespaces joined by a veth, AF_XDP, inline polling (the
# test's thread drives the stack) on both sides, each busy-polling its CQ
# as perftest does, each process on its own CPU. Prints t_typical per run and the medians. Root; the namespaces go
# on exit and on signals.
#
#   bench/scripts/verbs-vs-api.sh [ITERS] [ROUNDS] [SERVER_CPU CLIENT_CPU]
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-5000}
rounds=${2:-3}
cs=${3:-0}
cc=${4:-1}
bin=target/release/iwarp-perf
[ -x "$bin" ] || cargo build --release -q -p iwarp-bench --bin iwarp-perf || exit 1
lib=$(scripts/verbs-build.sh) || exit 1
tag=vv$$
dir=$(mktemp -d)
cleanup() {
    ip netns del "$tag-a" 2>/dev/null
    ip netns del "$tag-b" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ip netns add "$tag-a" && ip netns add "$tag-b" || exit 1
ip link add "${tag}a" type veth peer name "${tag}b" || exit 1
ip link set "${tag}a" netns "$tag-a"; ip link set "${tag}b" netns "$tag-b"
for s in a b; do
    ip -n "$tag-$s" link set "${tag}$s" up
    ip netns exec "$tag-$s" ethtool -K "${tag}$s" tx off >/dev/null 2>&1
done
sleep 1

# One run: which (lib|api), tool (send_lat|read_lat); prints t_typical.
run() {
    local which=$1 tool=$2 s c
    if [ "$which" = lib ]; then
        s=(env "LD_LIBRARY_PATH=$lib" "IWARP_IFACE=${tag}a" IWARP_IP=10.91.0.1/24 "ib_$tool" -R -s 64 -n "$n")
        c=(env "LD_LIBRARY_PATH=$lib" "IWARP_IFACE=${tag}b" IWARP_IP=10.91.0.2/24 "ib_$tool" -R -s 64 -n "$n")
    else
        # --busy: the test's thread polls the CQ without pause, as
        # perftest's loop calls ibv_poll_cq (like for like).
        s=("$bin" "$tool" -R --busy -s 64 -n "$n" --iface "${tag}a" --ip 10.91.0.1/24)
        c=("$bin" "$tool" -R --busy -s 64 -n "$n" --iface "${tag}b" --ip 10.91.0.2/24)
    fi
    timeout 60 ip netns exec "$tag-a" taskset -c "$cs" "${s[@]}" >"$dir/s.log" 2>&1 &
    local sp=$!
    sleep 1
    timeout 55 ip netns exec "$tag-b" taskset -c "$cc" "${c[@]}" 10.91.0.1 >"$dir/c.log" 2>&1
    local rc=$?
    wait "$sp"
    if [ "$rc" != 0 ]; then
        echo "FAILED ($which $tool rc $rc)" >&2
        tail -5 "$dir/c.log" >&2
        echo nan
        return
    fi
    # #bytes #iterations t_min t_max t_typical ...
    awk '$1 == 64 && NF >= 9 { print $5; exit }' "$dir/c.log"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for tool in send_lat read_lat; do
    : >"$dir/lib.$tool"
    : >"$dir/api.$tool"
    for r in $(seq "$rounds"); do
        for which in lib api; do
            t=$(run "$which" "$tool")
            echo "$tool round $r $which: t_typical $t us"
            echo "$t" >>"$dir/$which.$tool"
        done
    done
    l=$(median <"$dir/lib.$tool")
    a=$(median <"$dir/api.$tool")
    echo "$tool 64 B, median t_typical: Debian ib_$tool on our library $l us, iwarp-perf $tool (Rust API) $a us, difference $(awk -v l="$l" -v a="$a" 'BEGIN { printf "%.2f", l - a }') us"
done
