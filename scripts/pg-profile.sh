#!/usr/bin/env bash
# What PostgreSQL does for kassa under one benchmark scenario, per operation: its statements and
# their time (pg_stat_statements), what its backends wait on (pg_stat_activity, sampled), the
# commits, the WAL bytes and records, the rows each table takes and the index entries they add.
# BENCHMARKS.md, "Where PostgreSQL's time goes", reads its output.
# Usage (any `kassa bench` arguments but --database-url, --buyers, --seconds and --json):
#   scripts/pg-profile.sh                              # the checkout over HTTP (basket and confirm)
#   scripts/pg-profile.sh --scenario spread            # the full purchase
#   WARMUP=8 scripts/pg-profile.sh --scenario notify-direct   # past the untimed orders, into the notifications
# It starts a PostgreSQL cluster of its own (initdb, pg_ctl on a free port, under OUT; run as the
# postgres user when the script runs as root), with pg_stat_statements loaded and PostgreSQL's
# defaults otherwise (durable commits), so the machine's own server is left alone. kassa bench
# spawns its kassa on a fresh database there; after WARMUP seconds (3) every counter is reset,
# RECORD seconds (8) are recorded, and the counters are read while the load still runs.
# Settings: BUYERS (64), WARMUP, RECORD, SAMPLE_MS (10: how often the waits are sampled),
# OUT (target/pg-profile), NAME (the output files' stem; default from the arguments), SERVER_BIN
# (another kassa binary to serve, driven by this tree's load generator: a build of another commit,
# as scripts/bench-compare.sh keeps them under target/bench-compare/).
# Output: OUT/NAME.txt (the tables below), OUT/NAME.json (the run's report).
# An operation is a confirm (an order inserted) or, where the window places no order (notify), a
# notification applied (an order marked paid with what it captured).
set -euo pipefail
cd "$(dirname "$0")/.."
BUYERS="${BUYERS:-64}"
WARMUP="${WARMUP:-3}"
RECORD="${RECORD:-8}"
SAMPLE_MS="${SAMPLE_MS:-10}"
OUT="$(mkdir -p "${OUT:-target/pg-profile}" && cd "${OUT:-target/pg-profile}" && pwd)"
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--scenario checkout)
name="${NAME:-$(printf '%s ' "${args[@]}" | sed -E 's/[^A-Za-z0-9]+/-/g; s/^-+//; s/-+$//')}"
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -n "$pgbin" ] || { echo "pg-profile.sh needs PostgreSQL's server binaries (Debian: postgresql)" >&2; exit 2; }
command -v psql >/dev/null || { echo "pg-profile.sh needs psql (Debian: postgresql-client)" >&2; exit 2; }

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cluster="$OUT/cluster"
rm -rf "$cluster"
mkdir -p "$cluster"
[ "$(id -u)" = 0 ] && chown postgres "$cluster"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
as_pg "$pgbin/initdb" -D "$cluster/data" -A trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$cluster/data" -l "$cluster/log" -w start -o \
  "-p $port -c listen_addresses=127.0.0.1 -k $cluster -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=2000 -c pg_stat_statements.track_planning=on" >/dev/null
trap 'as_pg "$pgbin/pg_ctl" -D "$cluster/data" -m immediate -w stop >/dev/null 2>&1 || true' EXIT
psql_at() { local db="$1"; shift; psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"; }
psql_at postgres -c "CREATE EXTENSION pg_stat_statements" -c "CREATE DATABASE kassa_profile"

cargo build --release -q
bin="${CARGO_TARGET_DIR:-target}/release/kassa"
[ -n "${SERVER_BIN:-}" ] && args+=(--server-bin "$SERVER_BIN")
RUST_LOG=warn "$bin" bench --buyers "$BUYERS" --seconds $((WARMUP + RECORD + 3)) --json "$OUT/$name.json" \
  --database-url "postgres://postgres@127.0.0.1:$port/kassa_profile" "${args[@]}" >"$OUT/$name.bench.txt" &
bench=$!
trap 'pkill -P $bench 2>/dev/null; kill $bench 2>/dev/null || true; as_pg "$pgbin/pg_ctl" -D "$cluster/data" -m immediate -w stop >/dev/null 2>&1 || true' EXIT
# The database exists once the spawned kassa has migrated it; then the warm-up.
for _ in $(seq 600); do
  [ "$(psql_at postgres -At -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'kassa_profile'")" -gt 0 ] && break
  sleep 0.1
done
sleep "$WARMUP"

psql_at kassa_profile -c "SELECT pg_stat_reset()" >/dev/null
psql_at postgres -c "SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')" \
  -c "CREATE UNLOGGED TABLE pg_profile_mark AS SELECT pg_current_wal_insert_lsn() AS lsn, clock_timestamp() AS at" >/dev/null
# What the backends wait on, sampled every SAMPLE_MS for RECORD seconds, in one session.
psql_at postgres -At -F $'\t' >"$OUT/$name.waits" <<SQL
CREATE TEMP TABLE samples (state text, type text, event text);
DO \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  WHILE clock_timestamp() < t0 + make_interval(secs => $RECORD) LOOP
    INSERT INTO samples
      SELECT state, coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running')
      FROM pg_stat_activity
      WHERE datname = 'kassa_profile' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
        AND state IN ('active', 'idle in transaction');
    PERFORM pg_stat_clear_snapshot();
    PERFORM pg_sleep($SAMPLE_MS / 1000.0);
  END LOOP;
END
\$\$;
SELECT state, type, event, count(*), round(100.0 * count(*) / sum(count(*)) OVER (), 1) FROM samples GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 15;
SQL

ops="$(psql_at postgres -At -c "SELECT coalesce(nullif((SELECT sum(calls) FROM pg_stat_statements WHERE query LIKE '%INSERT INTO orders (%'), 0), (SELECT sum(calls) FROM pg_stat_statements WHERE query LIKE '%UPDATE orders SET status = \$1, updated_at = \$2, captured_minor = %'), 0)")"
# Read while the load still runs: the statements and WAL (in the postgres database, where the
# extension is), then the tables (in kassa's).
psql_at postgres -P pager=off -P footer=off >"$OUT/$name.txt" <<'SQL'
CREATE TEMP TABLE s AS
  SELECT regexp_replace(query, '\s+', ' ', 'g') AS query, calls, total_exec_time, rows, wal_bytes, plans, mean_plan_time
  FROM pg_stat_statements
  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'kassa_profile');
CREATE TEMP TABLE w AS
  SELECT (pg_current_wal_insert_lsn() - m.lsn)::numeric AS bytes, (SELECT wal_records FROM pg_stat_wal) AS records,
         (SELECT wal_fpi FROM pg_stat_wal) AS fpi, extract(epoch FROM clock_timestamp() - m.at) AS secs
  FROM pg_profile_mark m;
-- The operations: orders placed, else payment attempts marked paid.
CREATE TEMP TABLE ops AS
  SELECT coalesce(nullif((SELECT sum(calls) FROM s WHERE query LIKE '%INSERT INTO orders (%'), 0),
                  (SELECT sum(calls) FROM s WHERE query LIKE '%UPDATE orders SET status = $1, updated_at = $2, captured_minor = %'), 0)::numeric AS n,
         CASE WHEN coalesce((SELECT sum(calls) FROM s WHERE query LIKE '%INSERT INTO orders (%'), 0) > 0 THEN 'confirm' ELSE 'notification applied' END AS what;
\echo '## Per operation'
SELECT o.what AS "operation", o.n AS "in the window", round(o.n / w.secs) AS "per second",
       round((SELECT sum(calls) FROM s WHERE query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK') AND query NOT LIKE 'BEGIN%') / nullif(o.n, 0), 2) AS "statements",
       round((SELECT sum(calls) FROM s WHERE query = 'COMMIT') / nullif(o.n, 0), 2) AS "commits",
       round((SELECT sum(total_exec_time) FROM s)::numeric / nullif(o.n, 0), 3) AS "statement ms",
       round(w.bytes / nullif(o.n, 0)) AS "WAL bytes", round(w.records / nullif(o.n, 0), 1) AS "WAL records",
       round(w.fpi / nullif(o.n, 0), 2) AS "full-page images"
FROM ops o, w;
\echo
\echo '## Statements, by their share of the time'
SELECT round(100 * total_exec_time / sum(total_exec_time) OVER ())::int AS "% time",
       round(calls / nullif((SELECT n FROM ops), 0), 2) AS "calls/op",
       round((total_exec_time / calls)::numeric, 3) AS "mean ms",
       round(rows::numeric / calls, 1) AS "rows/call",
       round(plans::numeric / calls, 2) AS "plans/call", round(mean_plan_time::numeric, 3) AS "plan ms",
       round(wal_bytes / nullif((SELECT n FROM ops), 0)) AS "WAL B/op",
       left(query, 120) AS "statement"
FROM s ORDER BY total_exec_time DESC LIMIT 30;
SQL
psql_at kassa_profile -P pager=off -P footer=off -v ops="$ops::numeric" >>"$OUT/$name.txt" <<'SQL'
\echo '## Rows and index entries per operation (an entry in each index for every row inserted and every update that is not HOT; a partial index counted as if it took one)'
SELECT t.relname AS "table",
       round(t.n_tup_ins / nullif(:ops, 0), 2) AS "inserted",
       round(t.n_tup_upd / nullif(:ops, 0), 2) AS "updated",
       round(t.n_tup_hot_upd / nullif(:ops, 0), 2) AS "of them HOT",
       round(t.n_tup_del / nullif(:ops, 0), 2) AS "deleted",
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid) AS "indexes",
       round((t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd) * (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid)
             / nullif(:ops, 0), 2) AS "index entries"
FROM pg_stat_user_tables t
WHERE t.n_tup_ins + t.n_tup_upd + t.n_tup_del > 0
ORDER BY 7 DESC;
SELECT round(sum((t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd) * (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid))
             / nullif(:ops, 0), 1) AS "index entries per operation, in all"
FROM pg_stat_user_tables t;
SQL
{
  echo
  echo "## What the backends wait on (sampled every $SAMPLE_MS ms; CPU: active, no wait event)"
  printf 'state\ttype\tevent\tsamples\t%%\n'
  cat "$OUT/$name.waits"
} >>"$OUT/$name.txt"
wait "$bench" || true
{
  echo
  echo "## The run (kassa bench, $BUYERS buyers, the whole run)"
  grep -v '^{' "$OUT/$name.bench.txt"
} >>"$OUT/$name.txt"
cat "$OUT/$name.txt"
