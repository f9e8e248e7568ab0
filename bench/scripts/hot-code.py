#!/usr/bin/env python3
"""The code a watched 64-octet ping-pong round trip runs, and how densely
it sits in 64-octet instruction cache lines.

    bench/scripts/hot-code.py [BINARY] [-- STACK-COST ARGS]

BINARY defaults to target/release/stack-cost (build it first:
`cargo build --release -p iwarp-bench --bin stack-cost`); the arguments
default to `-s 64 --mib 1 --mtu 1500 --pingpong --watch --trusted-link`
(add `--transport sctp` for DDP over SCTP). Runs the binary under
callgrind (valgrind) with one entry per instruction, sizes each
instruction from `objdump -d`, and prints:

- the instructions run at least once every other round trip ("hot"),
  their bytes, the cache lines they touch and the density (hot bytes over
  those lines' bytes), in all and per function;
- the source places (the innermost of our own inlined frames, by
  `addr2line`) of the bytes that share those lines but ran less often:
  what a cold path out of line would take out of them.

Instructions in `stack-cost` are exact and repeatable, so two builds
compare by these counts where time on a noisy host does not
(bench/README.md, "Software cost per message").
"""

import collections
import os
import re
import subprocess
import sys
import tempfile

DEFAULT_ARGS = "-s 64 --mib 1 --mtu 1500 --pingpong --watch --trusted-link".split()
LINE = 64


def instructions(binary):
    """(address -> length, every address in order) of the instructions
    objdump decodes."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary],
        capture_output=True, text=True, check=True,
    ).stdout
    size, every, prev = {}, [], None
    for ln in out.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s", ln)
        if m:
            a = int(m.group(1), 16)
            every.append(a)
            if prev is not None and 0 < a - prev < 16:
                size[prev] = a - prev
            prev = a
        else:
            prev = None
    return size, every


def executions(profile):
    """(address -> times run, address -> function) from a callgrind file
    written with --dump-instr=yes --dump-line=no."""
    names, count, owner = {}, collections.Counter(), {}
    fn, pos, skip = None, 0, False

    def name(s):
        m = re.match(r"\((\d+)\)(?: (.*))?", s)
        if not m:
            return s
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), s)

    for ln in open(profile):
        ln = ln.rstrip("\n")
        if ln.startswith("fn="):
            fn = name(ln[3:])
            continue
        if ln.startswith("cfn="):
            name(ln[4:])
            continue
        if ln.startswith("calls="):
            skip = True  # the next line is the call's inclusive cost
            continue
        if not ln or not (ln[0] in "+-*" or ln[0].isdigit()):
            continue
        parts = ln.split()
        p = parts[0]
        if p.startswith("0x"):
            pos = int(p, 16)
        elif p.startswith("+"):
            pos += int(p[1:])
        elif p.startswith("-"):
            pos -= int(p[1:])
        if skip:
            skip = False
            continue
        count[pos] += int(parts[1]) if len(parts) > 1 else 0
        owner[pos] = fn
    return count, owner


def round_trips(args):
    """Round trips (or Writes) the stack-cost arguments ask for: --mib MiB
    of -s/--size octets each (stack-cost's defaults where not given)."""
    def value(names, default):
        for i, a in enumerate(args[:-1]):
            if a in names:
                return int(args[i + 1])
        return default
    size = value(("-s", "--size"), 65536)
    mib = value(("--mib",), 1024)
    return max(1, mib * (1 << 20) // size)


def main():
    argv = sys.argv[1:]
    extra = DEFAULT_ARGS
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    binary = argv[0] if argv else "target/release/stack-cost"
    hot_min = round_trips(extra) // 2
    with tempfile.TemporaryDirectory() as d:
        profile = os.path.join(d, "callgrind.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--dump-line=no",
             f"--callgrind-out-file={profile}", binary, *extra],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        count, owner = executions(profile)
    size, every = instructions(binary)
    hot = [a for a, n in count.items() if n >= hot_min]
    lines = set()
    per_fn = collections.defaultdict(lambda: [set(), 0])
    for a in hot:
        n = size.get(a, 4)
        span = {x // LINE for x in range(a, a + n)}
        lines |= span
        per_fn[owner[a]][0].update(span)
        per_fn[owner[a]][1] += n
    hot_bytes = sum(size.get(a, 4) for a in hot)
    print(f"{binary} {' '.join(extra)}")
    print(f"hot instructions (run >= {hot_min} times, every other round trip): "
          f"{len(hot)}, {hot_bytes} bytes ({hot_bytes / 1024:.1f} KiB)")
    print(f"on {len(lines)} lines of {LINE} octets ({len(lines) * LINE / 1024:.1f} KiB): "
          f"density {hot_bytes / (len(lines) * LINE):.2f}")
    print("\nlines  hot bytes  density  function")
    rows = sorted(((len(s), b, f) for f, (s, b) in per_fn.items()), reverse=True)
    for n, b, f in rows[:25]:
        print(f"{n:5d}  {b:9d}  {b / (n * LINE):7.2f}  {f[:110]}")
    # Cold bytes inside hot lines, by source place.
    cold = [a for a in every if a // LINE in lines and count.get(a, 0) < hot_min]
    frames, cur = {}, None
    if cold:
        out = subprocess.run(["addr2line", "-a", "-i", "-e", binary] + [hex(a) for a in cold],
                             capture_output=True, text=True).stdout
        for ln in out.splitlines():
            if ln.startswith("0x"):
                cur = int(ln, 16)
                frames[cur] = []
            elif ln and cur is not None:
                frames[cur].append(re.sub(r" \(discriminator \d+\)", "", ln))
    here = os.getcwd() + "/"
    places = collections.Counter()
    for a in cold:
        ours = [f for f in frames.get(a, []) if f.startswith(here)]
        places[(ours[0] if ours else "(library or unknown)").replace(here, "")] += size.get(a, 4)
    print(f"\ncold bytes in those lines: {sum(places.values())}; the most, by source place:")
    for place, b in places.most_common(20):
        print(f"{b:6d}  {place}")


if __name__ == "__main__":
    main()
