#!/usr/bin/env bash
# perftest mode with each process confined to one CPU (taskset), as a verbs
# program pinned with one thread runs: write_lat 64 B over AF_XDP on a veth
# and over memif (ours; --memif-driver dpdk for DPDK's), inline (the test's thread drives the stack) and with
# a poll loop thread (--loop-thread), busy and waiting; then sockperf's TCP
# ping-pong over a veth on the same two CPUs, spinning and blocking.
# Root; namespaces and the memif socket are removed on exit and on signals.
#
#   bench/scripts/one-cpu-perftest.sh [ITERS] [SERVER_CPU CLIENT_CPU]
set -uo pipefail
cd "$(dirname "$0")/../.."
n=${1:-20000}
cs=${2:-0}
cc=${3:-1}
bin=target/release/iwarp-perf
[ -x "$bin" ] || cargo build --release -q -p iwarp-bench --bin iwarp-perf || exit 1
tag=oc$$
dir=$(mktemp -d)
cleanup() {
    for ns in "$tag-a" "$tag-b" "$tag-ka" "$tag-kb"; do ip netns del "$ns" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
pair() { # namespaces $1 $2 joined by veth $3/$4
    ip netns add "$1" && ip netns add "$2" || exit 1
    ip link add "$3" type veth peer name "$4" || exit 1
    ip link set "$3" netns "$1"; ip link set "$4" netns "$2"
    ip -n "$1" link set "$3" up; ip -n "$2" link set "$4" up
    ip -n "$1" link set lo up; ip -n "$2" link set lo up
}
pair "$tag-a" "$tag-b" "${tag}a" "${tag}b"
pair "$tag-ka" "$tag-kb" "${tag}ka" "${tag}kb"
ip -n "$tag-ka" addr add 10.92.0.1/24 dev "${tag}ka"
ip -n "$tag-kb" addr add 10.92.0.2/24 dev "${tag}kb"
sleep 1

ours() { # label, link (veth|memif), flags...
    local label=$1 link=$2 s c peer
    shift 2
    if [ "$link" = veth ]; then
        s="--iface ${tag}a --in-netns $tag-a --ip 10.90.0.1/24"
        c="--iface ${tag}b --in-netns $tag-b --ip 10.90.0.2/24"
        peer=10.90.0.1
    else
        rm -f "$dir/m.sock"
        s="--memif-socket $dir/m.sock --ip 10.90.1.1/24"
        c="--memif-socket $dir/m.sock --ip 10.90.1.2/24"
        peer=10.90.1.1
    fi
    # shellcheck disable=SC2086 # $s and $c are flag lists
    timeout 50 taskset -c "$cs" "$bin" write_lat -R -s 64 -n "$n" $s "$@" >"$dir/s.log" 2>&1 &
    local sp=$!
    sleep 1.5
    # shellcheck disable=SC2086
    timeout 45 taskset -c "$cc" "$bin" write_lat -R -s 64 -n "$n" "$@" $c "$peer" >"$dir/c.log" 2>&1
    local rc=$?
    wait "$sp"
    if [ "$rc" = 0 ]; then
        printf '%-34s %s\n' "$label $link" "$(grep -A1 '#bytes' "$dir/c.log" | tail -n 1)"
    else
        printf '%-34s %s\n' "$label $link" "did not finish (exit $rc)"
    fi
}
echo "write_lat -R 64 B, $n iterations, server on CPU $cs, client on CPU $cc; columns as perftest's"
printf '%-34s %s\n' "" " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
for link in memif veth; do
    ours "inline --busy" "$link" --busy
    ours "inline (waiting)" "$link"
    ours "loop thread (adaptive)" "$link" --loop-thread
done
for link in memif veth; do
    ours "loop thread --busy" "$link" --busy --loop-thread
done
kern() { # label, sockperf flags
    # shellcheck disable=SC2086
    ip netns exec "$tag-ka" taskset -c "$cs" timeout 30 sockperf sr --tcp -i 10.92.0.1 -p 11111 $2 >/dev/null 2>&1 &
    local sp=$!
    sleep 1
    # shellcheck disable=SC2086
    ip netns exec "$tag-kb" taskset -c "$cc" timeout 20 sockperf pp --tcp -i 10.92.0.1 -p 11111 -m 64 -t 4 $2 2>&1 \
        | grep -E "percentile (50\.000|99\.000|99\.900)|<MAX>|Total [0-9]+ observations" | sed 's/\x1b\[[0-9;]*m//g' | tr -s ' ' | sed "s/^/$1 /"
    kill "$sp" 2>/dev/null
    wait "$sp" 2>/dev/null
}
if command -v sockperf >/dev/null; then
    kern "sockperf TCP spinning (--nonblocked)" "--nonblocked"
    kern "sockperf TCP blocking" ""
else
    echo "sockperf not installed (scripts/deps.sh --bench): no kernel baseline"
fi
