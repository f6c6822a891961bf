#!/usr/bin/env bash
# Runs the benchmark scenarios RUNS times each and prints the median of every figure as a
# Markdown table (the source of BENCHMARKS.md). Usage:
#   scripts/bench.sh                          # SQLite scenarios, engine, durable-commit limit
#   PG_URL=postgres://postgres@127.0.0.1:5432 scripts/bench.sh   # also PostgreSQL and pgbench
#   SQLITE=0 PG_URL=… scripts/bench.sh        # PostgreSQL and pgbench only
#   PG_SOCKET=/var/run/postgresql …           # also checkout and spread over PostgreSQL's Unix socket
#   GOALS=1 PG_URL=… scripts/bench.sh         # only the runs the goals read, and both limits
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
BUYERS="${BUYERS:-64}"
out="$(mktemp -d)"
cargo build --release -q
bin=target/release/kassa
export RUST_LOG=warn

run() { # name, args...
  local name=$1; shift
  for i in $(seq 1 "$RUNS"); do
    "$bin" bench --buyers "$BUYERS" --seconds "$SECONDS_PER_RUN" --json "$out/$name-$i.json" "$@" >/dev/null 2>&1 || true
  done
}

goals="${GOALS:-0}"
if [ "${SQLITE:-1}" != 0 ]; then # SQLITE=0: PostgreSQL's runs only
run sqlite-commit-limit --scenario commit-limit
run sqlite-spread --scenario spread
fi
if [ "${SQLITE:-1}" != 0 ] && [ "$goals" = 0 ]; then
run sqlite-spread-line-request --scenario spread --line-request
run sqlite-hot --scenario hot
run sqlite-notify --scenario notify
run sqlite-notify-direct --scenario notify-direct
run sqlite-mixed --scenario mixed
run sqlite-checkout --scenario checkout
run engine-sqlite-spread --engine --scenario spread
run engine-sqlite-hot --engine --scenario hot
run engine-sqlite-confirm --engine --scenario confirm
KASSA_SQLITE_GROUP_COMMIT=0 run sqlite-spread-no-group-commit --scenario spread
KASSA_SQLITE_GROUP_COMMIT=0 run engine-sqlite-spread-no-group-commit --engine --scenario spread
KASSA_SQLITE_PIN=0 run sqlite-spread-writer-unpinned --scenario spread
KASSA_SQLITE_PIN=0 run engine-sqlite-spread-writer-unpinned --engine --scenario spread
fi

if [ -n "${PG_URL:-}" ]; then
  # The limits: pgbench's TPC-B-like transactions, 64 clients, durable commits (synchronous_commit=on),
  # at scale 10 (ten branch rows: a spread load) and at scale 1 (one branch row that every
  # transaction updates: the contention of the hot SKU), each run after every round of kassa's runs
  # so the machine's drift weighs on both alike.
  for scale in 10 1; do
    psql "$PG_URL/postgres" -qc "DROP DATABASE IF EXISTS kassa_pgbench_$scale" -qc "CREATE DATABASE kassa_pgbench_$scale" >/dev/null
    pgbench -q -i -s "$scale" "$PG_URL/kassa_pgbench_$scale" >/dev/null 2>&1
  done
  # PostgreSQL's CPU time so far (its processes and the ended backends the postmaster waited for,
  # in clock ticks of 10 ms): PostgreSQL's CPU per pgbench transaction, to read against its CPU
  # per purchase in the kassa runs.
  # (A process may end between the listing and the read: cat then fails, and that is fine.)
  pg_ticks() { { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk '$2 == "(postgres)" {t += $14 + $15 + $16 + $17} END {print t + 0}'; }
  pgbench_run() { # scale, file stem
    local before after result
    before=$(pg_ticks)
    result=$(pgbench -c "$BUYERS" -j 2 -T "$SECONDS_PER_RUN" "$PG_URL/kassa_pgbench_$1" 2>/dev/null)
    after=$(pg_ticks)
    echo "$result" | awk '/^tps/ {print $3}' >> "$out/$2.txt"
    echo "$result" | awk -v d=$((after - before)) '/actually processed/ {n = $NF} END {if (n > 0) printf "%.3f\n", d * 10 / n}' \
      >> "$out/$2-cpu.txt"
  }
  for i in $(seq 1 "$RUNS"); do
    # PG_SOCKET=/var/run/postgresql: also checkout and spread over PostgreSQL's Unix socket.
    all="spread spread-line-request spread-one-by-one hot notify notify-direct checkout checkout-no-fold engine-spread
      engine-confirm engine-confirm-one-by-one ${PG_SOCKET:+checkout-socket spread-socket}"
    [ "$goals" = 1 ] && all="checkout spread notify-direct hot"
    for s in $all; do
      db="kassa_bench_$(date +%s%N)"
      psql "$PG_URL/postgres" -qc "CREATE DATABASE $db" >/dev/null
      pipeline=1
      fold=1
      url="$PG_URL/$db"
      case "$s" in
        *-one-by-one) pipeline=0; s0="${s%-one-by-one}";;
        *-no-fold) fold=0; s0="${s%-no-fold}";;
        *-socket) s0="${s%-socket}"; pg_user="${PG_URL#*://}"; pg_user="${pg_user%%@*}"
          url="postgres://$pg_user@localhost/$db?host=$PG_SOCKET";;
        *) s0="$s";;
      esac
      case "$s0" in
        engine-*) mode=(--engine --scenario "${s0#engine-}");;
        spread-line-request) mode=(--scenario spread --line-request);;
        *) mode=(--scenario "$s0");;
      esac
      # `-one-by-one`: a batch's statements sent one round trip each (not pipelined, for comparison);
      # `-no-fold`: a batch's inserts sent as statements of their own.
      KASSA_PG_PIPELINE="$pipeline" KASSA_PG_FOLD="$fold" "$bin" bench --buyers "$BUYERS" --seconds "$SECONDS_PER_RUN" "${mode[@]}" --database-url "$url" \
        --json "$out/pg-$s-$i.json" >/dev/null 2>&1 || true
      psql "$PG_URL/postgres" -qc "DROP DATABASE $db WITH (FORCE)" >/dev/null
    done
    pgbench_run 10 pgbench
    pgbench_run 1 pgbench-scale-1
  done
  for scale in 10 1; do psql "$PG_URL/postgres" -qc "DROP DATABASE kassa_pgbench_$scale" >/dev/null; done
fi

python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
groups = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json"):
        groups.setdefault(f.rsplit("-", 1)[0], []).append(json.load(open(os.path.join(out, f))))
def med(rows, key, sub=None):
    vals = [(r.get(key) or {}).get(sub) if sub else r.get(key) for r in rows]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None
def fmt(v, d=0):
    return "—" if v is None else f"{v:.{d}f}"
def rate(rows, key, count):
    # A rate the scenario does not measure (no confirm or no notification in any run) reads "—".
    return med(rows, key) if any(r.get(count) for r in rows) else None
print("| run | confirms/s | notifications/s | p50 ms | p95 ms | p99 ms | max ms | oversold | peak RSS MB | check | commits/s "
      "| CPU ms/op: server / load gen / PostgreSQL | CPU ceiling/s | DB round trips/op |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, rows in groups.items():
    print(f"| {name} (median of {len(rows)}) | {fmt(rate(rows,'confirms_per_s','confirms'))} | "
          f"{fmt(rate(rows,'notifications_per_s','notifications_applied'))} | "
          f"{fmt(med(rows,'latency_ms','p50'),1)} | {fmt(med(rows,'latency_ms','p95'),1)} | {fmt(med(rows,'latency_ms','p99'),1)} | "
          f"{fmt(med(rows,'latency_ms','max'),1)} | {max(r.get('oversold',0) for r in rows)} | {fmt(med(rows,'server_peak_rss_mb'),1)} | "
          f"{'clean' if all((r.get('check_violations') or 0) == 0 for r in rows) else 'VIOLATIONS'} | {fmt(med(rows,'commits_per_s'))} | "
          f"{' / '.join(fmt(med(rows,'cpu_ms_per_op',k),2) for k in ('server','load_generator','postgres'))} | "
          f"{fmt(med(rows,'cpu_ceiling_per_s'))} | {fmt(med(rows,'db_round_trips_per_op'),2)} |")
def limit(stem):
    p = os.path.join(out, stem + ".txt")
    vals = [float(x) for x in open(p).read().split()] if os.path.exists(p) else []
    return statistics.median(vals) if vals else None
for stem, what in (("pgbench", "scale 10"), ("pgbench-scale-1", "scale 1, one branch row")):
    tps, cpu = limit(stem), limit(stem + "-cpu")
    if tps:
        print(f"\npgbench (TPC-B-like, {what}): median {tps:.0f} tps, PostgreSQL's CPU {fmt(cpu, 2)} ms a transaction", end="")
print()
# The goals, each a median of this run against a limit of this run.
commit_limit = med(groups.get("sqlite-commit-limit", []), "commits_per_s")
pgbench, pgbench_1 = limit("pgbench"), limit("pgbench-scale-1")
goals = [
    ("PostgreSQL checkout / pgbench", "pg-checkout", "confirms_per_s", pgbench, ">=", 0.9),
    ("PostgreSQL full purchase / pgbench", "pg-spread", "confirms_per_s", pgbench, ">=", 0.5),
    ("PostgreSQL notify-direct / pgbench", "pg-notify-direct", "notifications_per_s", pgbench, ">=", 0.7),
    ("PostgreSQL hot SKU / pgbench at scale 1", "pg-hot", "confirms_per_s", pgbench_1, ">=", 0.7),
    ("SQLite full purchase / commit limit", "sqlite-spread", "confirms_per_s", commit_limit, ">=", 0.42),
]
rows = []
for label, group, key, against, op, goal in goals:
    v = med(groups.get(group, []), key)
    if v is not None and against:
        ratio = v / against
        rows.append(f"| {label} | {v:.0f} / {against:.0f} = {ratio:.2f} | {op} {goal} | {'met' if ratio >= goal else 'not met'} |")
p99 = med(groups.get("pg-checkout", []), "latency_ms", "p99")
if p99 is not None:
    rows.append(f"| PostgreSQL checkout p99 | {p99:.1f} ms | <= 50 ms | {'met' if p99 <= 50 else 'not met'} |")
if rows:
    print("\n| goal | this run | goal | |\n|---|---|---|---|")
    print("\n".join(rows))
PY
