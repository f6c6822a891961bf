#!/usr/bin/env bash
# Profiles kassa under one benchmark scenario: a flame graph of where the CPU goes (perf), or the
# instructions each operation costs (callgrind). BENCHMARKS.md, "Profiles", reads their output.
# Usage (any `kassa bench` arguments):
#   scripts/profile.sh                                        # SQLite spread over HTTP: the spawned kassa
#   scripts/profile.sh --scenario checkout --database-url postgres://…/fresh_db
#   scripts/profile.sh --engine --scenario spread             # the engine, no HTTP: the bench process
#   ALL=1 scripts/profile.sh --scenario spread                # every process (load generator, PostgreSQL)
#   CALLGRIND=1 scripts/profile.sh --engine --scenario spread # instructions per purchase (valgrind)
# Settings: BUYERS (64), WARMUP (3 s before recording), RECORD (5 s recorded), FREQ (499 Hz),
# OUT (target/profile), NAME (the output files' stem; default from the arguments). The script
# passes --buyers, --seconds and --json itself: leave them out of the arguments.
# Output: OUT/NAME.svg (open it in a browser: each frame's tooltip has its name and share),
# OUT/NAME.folded (folded stacks, for other flame graph tools), OUT/NAME.json (the run's report);
# with CALLGRIND=1, OUT/NAME.callgrind.txt.
# Needs perf (linux-perf) or valgrind, and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BUYERS="${BUYERS:-64}"
WARMUP="${WARMUP:-3}"
RECORD="${RECORD:-5}"
FREQ="${FREQ:-499}"
OUT="${OUT:-target/profile}"
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--scenario spread)
# The arguments as shown in the graph's title: a database URL's password is left out.
shown="$(printf '%s ' "${args[@]}" | sed -E 's#(://)[^@/ ]*@#\1…@#g; s/ $//')"
name="${NAME:-$(printf '%s' "$shown" | sed -E 's#[a-z]+://[^ ]*#db#g; s/[^A-Za-z0-9]+/-/g; s/^-+//; s/-+$//')}"
need() { command -v "$1" >/dev/null || { echo "profile.sh needs $1 ($2)" >&2; exit 2; }; }
need python3 "Debian: python3"
if [ "${CALLGRIND:-0}" = 1 ]; then need valgrind "Debian: valgrind"; else need perf "Debian: linux-perf"; fi

mkdir -p "$OUT"
cargo build --release -q
bin="${CARGO_TARGET_DIR:-target}/release/kassa"
export RUST_LOG=warn

engine=0
for a in "${args[@]}"; do [ "$a" = --engine ] && engine=1; done

if [ "${CALLGRIND:-0}" = 1 ]; then
  # Instructions are counted, not timed: the same binary and inputs give the same count on any
  # machine, busy or not. The run's set-up (migrations, the catalogue) is taken out by running
  # twice, SHORT and LONG seconds, and dividing the difference in instructions by the difference
  # in purchases. Under valgrind the threads take turns on one CPU, so batches are smaller than
  # in a timed run: compare counts with counts, not with a timed run's CPU.
  [ "$engine" = 1 ] || { echo "CALLGRIND=1 profiles the engine (--engine): one process" >&2; exit 2; }
  short="${SHORT:-4}"; long="${LONG:-12}"
  for s in "$short" "$long"; do
    valgrind --tool=callgrind --callgrind-out-file="$OUT/$name.$s.callgrind" \
      "$bin" bench --buyers "${CALLGRIND_BUYERS:-16}" --seconds "$s" --json "$OUT/$name.$s.json" "${args[@]}" \
      >/dev/null 2>"$OUT/$name.$s.valgrind.log"
  done
  python3 - "$OUT/$name" "$short" "$long" <<'PY' | tee "$OUT/$name.callgrind.txt"
import json, re, sys
stem, short, long = sys.argv[1:4]
def read(s):
    text = open(f"{stem}.{s}.callgrind").read()
    ir = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
    r = json.load(open(f"{stem}.{s}.json"))
    return ir, r["confirms"], r["notifications_applied"]
(i1, c1, n1), (i2, c2, n2) = read(short), read(long)
print(f"runs of {short} s and {long} s: {c1} and {c2} confirms, {n1} and {n2} notifications applied")
print(f"instructions: {i1:,} and {i2:,}")
if c2 > c1:
    print(f"instructions per confirm (with the scenario's work around it: basket, notifications), "
          f"the runs' difference: {(i2 - i1) / (c2 - c1):,.0f}")
else:
    sys.exit("no more confirms in the longer run (a sold-out hot SKU? raise --hot-stock): nothing to divide by")
PY
  exit 0
fi

"$bin" bench --buyers "$BUYERS" --seconds $((WARMUP + RECORD + 2)) --json "$OUT/$name.json" "${args[@]}" >/dev/null &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT
sleep "$WARMUP"
if [ "${ALL:-0}" = 1 ]; then
  # Every CPU, with frame-pointer stacks (cheap to record; frames of code built without frame
  # pointers are cut short, but every process is there, PostgreSQL's backends included).
  target=(-a -g)
elif [ "$engine" = 1 ]; then
  target=(-p "$bench" --call-graph dwarf,16384)
else
  server="$(pgrep -P "$bench" -f ' serve ' | head -1)"
  [ -n "$server" ] || { echo "no spawned kassa server found (is this an HTTP scenario?)" >&2; exit 1; }
  target=(-p "$server" --call-graph dwarf,16384)
fi
perf record -q -F "$FREQ" "${target[@]}" -o "$OUT/$name.perf.data" -- sleep "$RECORD"
wait "$bench" || true
trap - EXIT
perf script -i "$OUT/$name.perf.data" 2>/dev/null |
  python3 scripts/flamegraph.py --min-width "${MIN_WIDTH:-0.5}" --title "kassa bench $shown" --folded "$OUT/$name.folded" --top 15 >"$OUT/$name.svg"
echo "flame graph: $OUT/$name.svg (folded stacks: $OUT/$name.folded; the run: $OUT/$name.json)"
