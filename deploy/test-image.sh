#!/usr/bin/env bash
# Build image iwarp-rs and run it: two containers on a docker network of
# their own, our stack on each container's own eth0 with a spare address of
# that network (one the kernel does not own).
#
#   1. iwarp-sim demo in a container, as the image's non-root user, no
#      capabilities;
#   2. tlnc in both containers, stack to stack: 4 MiB each way, SHA-256
#      compared;
#   3. the container kernel's TCP (bash /dev/tcp) against tlnc --listen in
#      the other container, with TX checksum offload turned off on the
#      client's eth0 (deploy/README.md, "No route to host" and checksums).
#
# Needs root and a Docker engine (deploy/build-image.sh). Every wait is
# bounded; the containers and the network are removed on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)

id="$$"
net="iwarp-test-$id"
a="iwarp-test-a-$id"
b="iwarp-test-b-$id"
image="${IWARP_IMAGE:-iwarp-rs}"
work="$(mktemp -d /tmp/iwarp-image-test.XXXXXX)"

cleanup() {
    docker rm -f "$a" "$b" >/dev/null 2>&1 || true
    docker network rm "$net" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

fail() {
    echo "test-image: FAIL: $*" >&2
    for c in "$a" "$b"; do
        echo "--- $c: ip addr, ip neigh (host view of its netns)" >&2
        pid=$(docker inspect -f '{{.State.Pid}}' "$c" 2>/dev/null || echo 0)
        [ "$pid" != 0 ] && nsenter -t "$pid" -n sh -c 'ip -br addr; ip neigh' >&2 || true
    done
    exit 1
}

[ "$(id -u)" = 0 ] || { echo "test-image: needs root (nsenter, ethtool in the containers' namespaces)" >&2; exit 2; }
deploy/build-image.sh

# A /24 that no route on this machine uses yet.
subnet=""
for n in $(seq 200 250); do
    if ! ip route | grep -q "^172\.31\.$n\."; then
        subnet="172.31.$n"
        break
    fi
done
[ -n "$subnet" ] || { echo "test-image: no free 172.31.x.0/24" >&2; exit 2; }
docker network create --subnet "$subnet.0/24" "$net" >/dev/null
ip_a="$subnet.10" ip_b="$subnet.11"   # the containers' kernel addresses
stack_a="$subnet.20" stack_b="$subnet.21" # spare: our stacks'

caps=(--cap-add NET_ADMIN --cap-add SYS_ADMIN --cap-add NET_RAW --cap-add IPC_LOCK)
# Root inside the container: the capabilities above reach a process's
# effective set only as root (the image's default user is iwarp).
docker run -d --name "$a" --hostname a --network "$net" --ip "$ip_a" "${caps[@]}" --user 0 "$image" sleep 600 >/dev/null
docker run -d --name "$b" --hostname b --network "$net" --ip "$ip_b" "${caps[@]}" --user 0 "$image" sleep 600 >/dev/null
pid_a=$(docker inspect -f '{{.State.Pid}}' "$a")
pid_b=$(docker inspect -f '{{.State.Pid}}' "$b")

echo "== 1. iwarp-sim demo (non-root, no capabilities)"
out=$(timeout 120 docker run --rm --network none "$image" iwarp-sim demo) || fail "iwarp-sim demo"
echo "$out" | sed -n '3,9p'
echo "$out" | grep -q "^capture:" || fail "iwarp-sim demo printed no capture line"
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

echo "== test-image: all passed in $(($(date +%s) - t0)) s"
