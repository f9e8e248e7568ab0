#!/usr/bin/env bash
# Issue 26's scaling check: iwarp-perf write_bw --queues N over our memif,
# busy poll loops pinned one per CPU (server's loops on CPUs 0..N-1,
# client's on N..2N-1), the Linux TCP loopback baseline with N spinning
# flows pinned on the same CPUs, in the same process run. Each (size,
# connections) cell runs N = 1 then the larger N, ROUNDS times
# alternated; every run's summary line goes to stdout and its JSON to
# OUT_DIR.
#
#   bench/scripts/queue-scaling.sh            # needs 2 x max(QUEUES) CPUs
#   QUEUES="1 2" CONNS="2 8 64" SIZES="65536 64" ROUNDS=2 bench/scripts/queue-scaling.sh
#   EXTRA="--transport sctp" CONNS=8 SIZES=65536 bench/scripts/queue-scaling.sh
#
# Messages per connection: TOTAL_BIG (64 KiB) or TOTAL_SMALL (other sizes)
# divided by the connections, so every run moves about the same.
set -euo pipefail
BIN=${IWARP_PERF:-target/release/iwarp-perf}
QUEUES=${QUEUES:-"1 2"}
CONNS=${CONNS:-"2 8 64"}
SIZES=${SIZES:-"65536 64"}
ROUNDS=${ROUNDS:-2}
TOTAL_BIG=${TOTAL_BIG:-48000}
TOTAL_SMALL=${TOTAL_SMALL:-960000}
OUT_DIR=${OUT_DIR:-target/queue-scaling}
PER_RUN_S=${PER_RUN_S:-90}
EXTRA=${EXTRA:-}   # more iwarp-perf arguments, e.g. "--transport sctp" or "--mtu 9000"
mkdir -p "$OUT_DIR"
ncpu=$(nproc)
echo "# $(uname -r), $ncpu CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# size conns queues round | ours MB/s, M msg/s | Linux MB/s, M msg/s"
for size in $SIZES; do
  total=$TOTAL_SMALL
  [ "$size" -ge 65536 ] && total=$TOTAL_BIG
  for c in $CONNS; do
    n=$(( total / c )); [ "$n" -lt 1 ] && n=1
    for r in $(seq 1 "$ROUNDS"); do
      for q in $QUEUES; do
        if [ $((2 * q)) -gt "$ncpu" ]; then
          echo "$size $c $q $r | skipped: needs $((2 * q)) CPUs"; continue
        fi
        d="$OUT_DIR/s${size}-c${c}-q${q}-r${r}"
        mkdir -p "$d"
        if ! log=$(timeout "$PER_RUN_S" "$BIN" write_bw --link memif --busy --queues "$q" \
            --connections "$c" -s "$size" -n "$n" --core 0 --out "$d" $EXTRA 2>&1); then
          echo "$size $c $q $r | FAILED: $(echo "$log" | tail -3 | tr '\n' ' ')"; continue
        fi
        ours=$(echo "$log" | grep -m1 'iWARP (ours)' | sed -E 's/.*: ([0-9.]+) MB\/sec.*, ([0-9.]+) M messages.*/\1 \2/')
        linux=$(echo "$log" | grep -m1 'Linux TCP over loopback' | sed -E 's/.*: +([0-9.]+) MB\/sec.*, ([0-9.]+) M messages.*/\1 \2/')
        echo "$size $c $q $r | $ours | $linux"
      done
    done
  done
done
