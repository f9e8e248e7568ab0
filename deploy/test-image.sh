#!/usr/bin/env bash
# Build image iwarp-rs and run it: two containers on a docker network of
# their own, our stack on each container's own eth0 with a spare address of
# that network (one the kernel does not own).
#
#   1. iwarp-sim demo in a container, as the image's non-root user, no
#      capabilities;
#   2. tlnc in both containers, stack to stack: 4 MiB each way, SHA-256
#      compared (steps 2 to 6 as the image's non-root user, the AF_XDP
#      tools through their file capabilities, the containers given
#      SYS_ADMIN, NET_RAW and IPC_LOCK; no --user 0);
#   3. the container kernel's TCP (bash /dev/tcp) against tlnc --listen in
#      the other container, with TX checksum offload turned off on the
#      client's eth0 (deploy/README.md, "No route to host" and checksums);
#   4. perftest mode: iwarp-perf write_bw -R and read_lat -R, server in one
#      container, client in the other;
#   5. iwarp-serve in one container, `iwarp-serve --connect` in the other
#      (the region from the MPA Reply's private data; 256 blocks written,
#      read back and compared), /metrics scraped over the kernel's TCP,
#      then SIGTERM: the server closes its connections and exits 0;
#   5b. the same over DDP over SCTP (`--transport sctp`, raw IPv4; 64
#      blocks), its `iwarp_sctp_*` metrics scraped, then SIGTERM;
#   6. perftest mode over memif (ours; then DPDK's serving ours), no kernel
#      in the path: write_lat -R
#      and write_bw -R, the two containers sharing the memif socket through
#      a host directory mounted in both.
#
# Needs root and a Docker engine (deploy/build-image.sh). Every wait is
# bounded. The containers, the network and the image this run built
# (iwarp-rs-test:PID; kept when IWARP_IMAGE names one) are removed on any
# exit; the base image iwarp-base:bookworm is kept as the build's cache.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)

id="$$"
net="iwarp-test-$id"
a="iwarp-test-a-$id"
b="iwarp-test-b-$id"
if [ -n "${IWARP_IMAGE:-}" ]; then
    image="$IWARP_IMAGE" own_image=0
else
    image="iwarp-rs-test:$id" own_image=1
fi
work="$(mktemp -d /tmp/iwarp-image-test.XXXXXX)"

cleanup() {
    docker rm -f "$a" "$b" >/dev/null 2>&1 || true
    docker network rm "$net" >/dev/null 2>&1 || true
    if [ "$own_image" = 1 ]; then
        docker image rm -f "$image" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
    echo "test-image: FAIL: $*" >&2
    for c in "$a" "$b"; do
        echo "--- $c: ip addr, ip neigh (host view of its netns)" >&2
        pid=$(docker inspect -f '{{.State.Pid}}' "$c" 2>/dev/null || echo 0)
        if [ "$pid" != 0 ]; then
            nsenter -t "$pid" -n sh -c 'ip -br addr; ip neigh' >&2 || true
        fi
    done
    exit 1
}

[ "$(id -u)" = 0 ] || { echo "test-image: needs root (nsenter, ethtool in the containers' namespaces)" >&2; exit 2; }
IWARP_IMAGE="$image" deploy/build-image.sh

# A /24 that no route on this machine uses yet.
subnet=""
for n in $(seq 200 250); do
    if ! grep -q "^172\.31\.$n\." <<<"$(ip route)"; then
        subnet="172.31.$n"
        break
    fi
done
[ -n "$subnet" ] || { echo "test-image: no free 172.31.x.0/24" >&2; exit 2; }
docker network create --subnet "$subnet.0/24" "$net" >/dev/null
ip_a="$subnet.10" ip_b="$subnet.11"   # the containers' kernel addresses
stack_a="$subnet.20" stack_b="$subnet.21" # spare: our stacks'

# What the tools need, measured on this machine (Docker 20.10, which does
# not know CAP_BPF; kernel 6.18), each left out in turn: SYS_ADMIN for
# bpf(2) (BPF_MAP_CREATE refused without it), NET_RAW for the AF_XDP
# socket (in Docker's default set; named here all the same), IPC_LOCK for
# the UMEM (XDP_UMEM_REG fails with ENOBUFS under Docker's 8 MiB memlock
# limit). NET_ADMIN was not needed (the XDP link is attached with
# SYS_ADMIN); --share-address, which no step here uses, needs it too (its
# neighbour requests); see deploy/README.md. tools/tests/deploy_manifests.rs
# reads this line: the Kubernetes manifests must add the same list.
caps=(--cap-add SYS_ADMIN --cap-add NET_RAW --cap-add IPC_LOCK)
# The memif socket's directory, shared by both containers (step 6), the
# image's user's (uid 10001).
mkdir -p "$work/memif"
chown 10001:10001 "$work/memif"
caps+=(-v "$work/memif:/run/memif")
# The image's own user (iwarp, not root): the binaries carry their
# capabilities as file capabilities (permitted; deploy/Dockerfile), which
# the container's bounding set above lets through.
docker run -d --name "$a" --hostname a --network "$net" --ip "$ip_a" "${caps[@]}" "$image" sleep 600 >/dev/null
docker run -d --name "$b" --hostname b --network "$net" --ip "$ip_b" "${caps[@]}" "$image" sleep 600 >/dev/null
pid_a=$(docker inspect -f '{{.State.Pid}}' "$a")
for c in "$a" "$b"; do
    [ "$(docker exec "$c" id -u)" = 10001 ] || fail "$c runs its commands as uid $(docker exec "$c" id -u), not the image's user"
done

echo "== 1. iwarp-sim demo (non-root, no capabilities)"
out=$(timeout 120 docker run --rm --network none "$image" iwarp-sim demo) || fail "iwarp-sim demo"
echo "$out" | sed -n '3,9p'
grep -q "^capture:" <<<"$out" || fail "iwarp-sim demo printed no capture line"
[ "$(docker run --rm "$image" id -un)" = iwarp ] || fail "the image's default user is not iwarp"

echo "== 2. tlnc <-> tlnc, our stack on each container's eth0 ($stack_a -> $stack_b)"
docker exec "$a" sh -c 'head -c 4194304 /dev/urandom >/tmp/tx'
docker exec "$b" sh -c 'head -c 4194304 /dev/urandom >/tmp/tx'
timeout 60 docker exec "$b" tlnc --iface eth0 --ip "$stack_b/24" --listen 5201 \
    --input /tmp/tx --output /tmp/rx --timeout 50 --stats >"$work/b.log" 2>&1 &
server=$!
ok=0
for _ in $(seq 20); do
    if timeout 60 docker exec "$a" tlnc --iface eth0 --ip "$stack_a/24" --connect "$stack_b:5201" \
        --input /tmp/tx --output /tmp/rx --timeout 50 --stats >"$work/a.log" 2>&1; then
        ok=1
        break
    fi
    grep -q "refused" "$work/a.log" || break # only a listener not up yet is retried
    sleep 0.5
done
wait "$server" || { cat "$work/b.log" >&2; fail "tlnc --listen in $b"; }
[ "$ok" = 1 ] || { cat "$work/a.log" >&2; fail "tlnc --connect in $a"; }
sum() { docker exec "$1" sha256sum "$2" | cut -d' ' -f1; }
[ "$(sum "$a" /tmp/tx)" = "$(sum "$b" /tmp/rx)" ] || fail "a->b data differs"
[ "$(sum "$b" /tmp/tx)" = "$(sum "$a" /tmp/rx)" ] || fail "b->a data differs"
grep "tlnc: sent" "$work/a.log" "$work/b.log"
echo "4 MiB each way, SHA-256 equal at both ends"

echo "== 3. the kernel's TCP in $a -> tlnc --listen in $b ($stack_b)"
# Veth TX checksum offload hands the peer partial checksums (the field
# holds only the pseudo-header sum); tcp-lite checks and drops them.
nsenter -t "$pid_a" -n ethtool -K eth0 tx off >/dev/null
timeout 40 docker exec "$b" tlnc --iface eth0 --ip "$stack_b/24" --listen 5202 \
    --output /tmp/rx3 --timeout 30 </dev/null >"$work/b3.log" 2>&1 &
server=$!
ok=0
for _ in $(seq 20); do
    if timeout 10 docker exec "$a" bash -c \
        "exec 3<>/dev/tcp/$stack_b/5202 && head -c 1048576 /tmp/tx >&3 && exec 3>&-" 2>"$work/a3.log"; then
        ok=1
        break
    fi
    sleep 0.5
done
wait "$server" || { cat "$work/b3.log" >&2; fail "tlnc --listen in $b (kernel client)"; }
[ "$ok" = 1 ] || { cat "$work/a3.log" >&2; fail "the kernel's connect from $a"; }
[ "$(docker exec "$a" sh -c 'head -c 1048576 /tmp/tx | sha256sum' | cut -d' ' -f1)" = "$(sum "$b" /tmp/rx3)" ] \
    || fail "kernel->stack data differs"
echo "1 MiB from the kernel's TCP, SHA-256 equal"

echo "== 4. perftest mode: iwarp-perf write_bw -R and read_lat -R, $stack_a -> $stack_b"
for t in "write_bw -s 65536 -n 2000" "read_lat -s 64 -n 1000"; do
    # shellcheck disable=SC2086 # $t is the test and its flags
    timeout 90 docker exec "$b" iwarp-perf $t -R --iface eth0 --ip "$stack_b/24" \
        >"$work/pb.log" 2>&1 &
    server=$!
    # The client retries a refused connect while the server comes up.
    # shellcheck disable=SC2086
    timeout 90 docker exec "$a" iwarp-perf $t -R --iface eth0 --ip "$stack_a/24" "$stack_b" \
        >"$work/pa.log" 2>&1 || { cat "$work/pa.log" "$work/pb.log" >&2; fail "iwarp-perf $t client"; }
    wait "$server" || { cat "$work/pb.log" >&2; fail "iwarp-perf $t server"; }
    # perftest's result table: a header row naming #bytes, then one row.
    grep -q "#bytes" "$work/pa.log" || { cat "$work/pa.log" >&2; fail "iwarp-perf $t printed no result"; }
    echo "iwarp-perf $t:"
    grep -A1 "#bytes" "$work/pa.log"
done

echo "== 5. iwarp-serve in $b ($stack_b), iwarp-serve --connect in $a ($stack_a)"
# The server runs until SIGTERM; sh records its pid (exec keeps it).
timeout 130 docker exec "$b" sh -c 'echo $$ >/tmp/serve.pid; exec iwarp-serve --seconds 120 --iface eth0 --ip '"$stack_b"'/24 \
    --region-mib 4 --stats-addr 0.0.0.0:9464' >"$work/sb.log" 2>&1 &
server=$!
ok=0
for _ in $(seq 20); do
    if timeout 60 docker exec "$a" iwarp-serve --connect "$stack_b" --iface eth0 --ip "$stack_a/24" \
        --blocks 256 >"$work/sa.log" 2>&1; then
        ok=1
        break
    fi
    grep -q -i "refused\|busy" "$work/sa.log" || break # a server not up yet (or a queue not yet released) is retried
    sleep 0.5
done
[ "$ok" = 1 ] || { cat "$work/sa.log" "$work/sb.log" >&2; fail "iwarp-serve --connect in $a"; }
cat "$work/sa.log"
grep -q "^client: 256 blocks written and read back" "$work/sa.log" || fail "the client did not check 256 blocks"
# /metrics over the kernel's TCP, from the other container's kernel.
timeout 20 docker exec "$a" bash -c \
    "exec 3<>/dev/tcp/$ip_b/9464 && printf 'GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n' >&3 && cat <&3" \
    >"$work/metrics" || fail "GET /metrics from $ip_b:9464"
head -1 "$work/metrics" | grep -q "^HTTP/1.1 200" || { head -5 "$work/metrics" >&2; fail "/metrics answered no 200"; }
delivered=$(awk '$1 == "iwarp_tcp_delivered_bytes_total" { print $2 }' "$work/metrics")
# 256 Writes of 16 KiB arrive at the server: more than 4 MiB in order.
[ "${delivered:-0}" -gt 4194304 ] || fail "iwarp_tcp_delivered_bytes_total is ${delivered:-missing}, not above 4 MiB"
echo "/metrics: iwarp_tcp_delivered_bytes_total $delivered"
# SIGTERM while a client is connected: the server closes that connection
# (the client sees it closed under its work and exits 1), prints its final
# statistics and exits 0.
timeout 60 docker exec "$a" iwarp-serve --connect "$stack_b" --iface eth0 --ip "$stack_a/24" \
    --blocks 1000000 >"$work/sa2.log" 2>&1 &
client=$!
for _ in $(seq 50); do
    [ "$(grep -c "iwarp-serve: accepted" "$work/sb.log")" -ge 2 ] && break
    sleep 0.2
done
[ "$(grep -c "iwarp-serve: accepted" "$work/sb.log")" -ge 2 ] || { cat "$work/sa2.log" "$work/sb.log" >&2; fail "the second client did not connect"; }
sleep 0.5
docker exec "$b" sh -c 'kill -TERM "$(cat /tmp/serve.pid)"'
rc=0
wait "$server" || rc=$?
[ "$rc" = 0 ] || { cat "$work/sb.log" >&2; fail "iwarp-serve exited $rc after SIGTERM"; }
grep -q "^iwarp-serve: stopping by SIGTERM" "$work/sb.log" || { cat "$work/sb.log" >&2; fail "no graceful stop"; }
grep -q "^iwarp-serve: closed 1 of 1 client connections" "$work/sb.log" || { cat "$work/sb.log" >&2; fail "the server did not close its client"; }
grep -q "^iwarp-serve: final stats: 2 clients accepted" "$work/sb.log" || { cat "$work/sb.log" >&2; fail "no final stats"; }
wait "$client" || true # it ends because the server closed; how is its own business
grep "iwarp-serve: " "$work/sb.log" | tail -3 | cut -c1-160

echo "== 5b. the same over DDP over SCTP (RFC 5043): iwarp-serve --transport sctp in $b, --connect in $a"
timeout 70 docker exec "$b" sh -c 'echo $$ >/tmp/serve.pid; exec iwarp-serve --seconds 60 --transport sctp \
    --iface eth0 --ip '"$stack_b"'/24 --region-mib 1 --stats-addr 0.0.0.0:9465' >"$work/ssb.log" 2>&1 &
server=$!
# SCTP's INIT is retransmitted until the server's program is attached:
# one try, given time, with a retry only for a queue not yet released.
ok=0
for _ in $(seq 10); do
    if timeout 60 docker exec "$a" iwarp-serve --connect "$stack_b" --transport sctp --iface eth0 \
        --ip "$stack_a/24" --blocks 64 >"$work/ssa.log" 2>&1; then
        ok=1
        break
    fi
    grep -q -i "busy" "$work/ssa.log" || break
    sleep 0.5
done
[ "$ok" = 1 ] || { cat "$work/ssa.log" "$work/ssb.log" >&2; fail "iwarp-serve --connect --transport sctp in $a"; }
grep -q "^client: 64 blocks written and read back" "$work/ssa.log" || fail "the SCTP client did not check 64 blocks"
timeout 20 docker exec "$a" bash -c \
    "exec 3<>/dev/tcp/$ip_b/9465 && printf 'GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n' >&3 && cat <&3" \
    >"$work/smetrics" || fail "GET /metrics from $ip_b:9465"
sctp_rx=$(awk '$1 == "iwarp_sctp_rx_packets_total" { print $2 }' "$work/smetrics")
# 64 Writes of 16 KiB and 64 Reads: well over 64 SCTP packets in.
[ "${sctp_rx:-0}" -gt 64 ] || fail "iwarp_sctp_rx_packets_total is ${sctp_rx:-missing}, not above 64"
echo "/metrics: iwarp_sctp_rx_packets_total $sctp_rx"
docker exec "$b" sh -c 'kill -TERM "$(cat /tmp/serve.pid)"'
rc=0
wait "$server" || rc=$?
[ "$rc" = 0 ] || { cat "$work/ssb.log" >&2; fail "iwarp-serve over SCTP exited $rc after SIGTERM"; }
grep -q "^iwarp-serve: final stats: 1 clients accepted" "$work/ssb.log" || { cat "$work/ssb.log" >&2; fail "no final stats over SCTP"; }
grep "iwarp-serve: SCTP" "$work/ssb.log" | cut -c1-160

echo "== 6. perftest mode over memif: $b serves, $a connects, one socket in a shared volume"
# memif_run TEST SERVER_DRIVER CLIENT_DRIVER: one perftest-mode run across
# the two containers. The whole output first, then grep: `docker exec … |
# grep -q` under pipefail is false when grep's early exit gives docker exec
# a SIGPIPE (CI failed so).
memif_run() {
    local t=$1 sd=$2 cd=$3
    rm -f "$work/memif/link.sock"
    # shellcheck disable=SC2086 # $t is the test and its flags
    timeout 90 docker exec "$b" iwarp-perf $t -R --memif-socket /run/memif/link.sock \
        --memif-driver "$sd" --ip 10.81.0.2/24 >"$work/mb.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        [ -S "$work/memif/link.sock" ] && break
        sleep 0.1
    done
    [ -S "$work/memif/link.sock" ] || { cat "$work/mb.log" >&2; fail "the memif server made no socket"; }
    # shellcheck disable=SC2086
    timeout 90 docker exec "$a" iwarp-perf $t -R --memif-socket /run/memif/link.sock \
        --memif-driver "$cd" --ip 10.81.0.1/24 10.81.0.2 >"$work/ma.log" 2>&1 \
        || { cat "$work/ma.log" "$work/mb.log" >&2; fail "iwarp-perf $t client over memif ($sd server, $cd client)"; }
    wait "$server" || { cat "$work/mb.log" >&2; fail "iwarp-perf $t server over memif ($sd server, $cd client)"; }
    grep -q "#bytes" "$work/ma.log" || { cat "$work/ma.log" >&2; fail "iwarp-perf $t over memif printed no result"; }
    echo "iwarp-perf $t over memif ($sd server, $cd client):"
    grep -A1 "#bytes" "$work/ma.log"
}
# Our memif on both ends: no DPDK needed.
for t in "write_lat -s 64 -n 5000" "write_bw -s 65536 -n 2000"; do
    memif_run "$t" ours ours
done
# DPDK's net_memif serving our memif client, where the image has DPDK.
if grep -q librte_eal <<<"$(docker exec "$a" ldd /usr/local/bin/iwarp-perf)"; then
    memif_run "write_lat -s 64 -n 5000" dpdk ours
elif [ -n "${CI:-}" ]; then
    fail "the image's iwarp-perf has no DPDK: build-image.sh needs libdpdk-dev on the host (scripts/deps.sh --test)"
else
    echo "SKIP: DPDK's memif: the image was built without DPDK (install libdpdk-dev on the host)"
fi

echo "== test-image: all passed in $(($(date +%s) - t0)) s"
