#!/usr/bin/env bash
# Compares the working tree against REF in alternated pairs, as production runs kassa: rate limits
# on and keyed per simulated person (each person's address sent as X-Forwarded-For from the
# loopback, kassa's default trusted proxy), the open-orders limit at its default, durable commits,
# every other setting at its default but those `kassa bench` names in its report.
#
#   scripts/bench-compare.sh REF                 # e.g. origin/main, a commit, a tag
#   PAIRS=5 SECONDS_PER_RUN=8 BUYERS=64 scripts/bench-compare.sh REF
#   SCENARIOS="pg-checkout" scripts/bench-compare.sh REF
#   BUILD_ONLY=1 scripts/bench-compare.sh REF    # build REF's binary now, compare later
#
# Scenarios: sqlite-spread (the full purchase on SQLite), pg-checkout (basket and confirm on
# PostgreSQL), pg-spread (the full purchase on PostgreSQL); also sqlite-checkout, pg-hot,
# sqlite-hot, and pg-hot-digital and sqlite-hot-digital (the hot SKU selling card keys, `kassa
# bench --digital`). PostgreSQL runs need PG_URL (default postgres://postgres@127.0.0.1:5432), each run on
# a database of its own, dropped after it.
#
# Both sides are driven by the working tree's load generator (`kassa bench --server-bin`), so the
# only difference is the server. REF is built once in a throwaway worktree, in a target directory
# of its own kept for the next REF (target/bench-compare/target: the first build compiles every
# dependency, later ones mostly kassa), and kept as target/bench-compare/kassa-<commit>.
# Each pair runs REF and the tree back to back, in alternating order; the script prints every pair's
# confirms/s and ratio (tree / REF), then each scenario's median ratio. A ratio under 0.95 is a
# regression to find, not noise. Every run must end with zero oversold units and a clean
# `kassa check`; the script fails otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

if [ $# -ne 1 ]; then
  echo "usage: scripts/bench-compare.sh REF" >&2
  exit 2
fi
ref_sha="$(git rev-parse --verify "$1^{commit}")"
PAIRS="${PAIRS:-3}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-8}"
BUYERS="${BUYERS:-64}"
SCENARIOS="${SCENARIOS:-sqlite-spread pg-checkout pg-spread}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432}"
bins="$root/target/bench-compare"
mkdir -p "$bins"
export RUST_LOG=warn

ref_bin="$bins/kassa-$ref_sha"
if [ ! -x "$ref_bin" ]; then
  echo "== building REF ${ref_sha:0:12}" >&2
  wt="$(mktemp -d)/kassa-ref"
  git worktree add --detach -q "$wt" "$ref_sha"
  trap 'git -C "$root" worktree remove --force "$wt" 2>/dev/null || true' EXIT
  (cd "$wt" && CARGO_TARGET_DIR="$bins/target" cargo build --release -q)
  cp "$bins/target/release/kassa" "$ref_bin.tmp" && mv "$ref_bin.tmp" "$ref_bin"
  git worktree remove --force "$wt"
  trap - EXIT
fi
# BUILD_ONLY=1: REF's binary only, to run the pairs later.
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
echo "== building the working tree" >&2
cargo build --release -q
tree_bin="$bins/kassa-tree"
cp target/release/kassa "$tree_bin"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# run SIDE SCENARIO N: one run of the tree's load generator against SIDE's server, its report in
# $out/SCENARIO-SIDE-N.json.
run() {
  local side=$1 scenario=$2 n=$3 server_bin json db="" url=()
  if [ "$side" = ref ]; then server_bin="$ref_bin"; else server_bin="$tree_bin"; fi
  json="$out/$scenario-$side-$n.json"
  local mode=(--scenario "${scenario#*-}")
  case "$scenario" in
    *-digital) mode=(--scenario "${mode[1]%-digital}" --digital) ;;
  esac
  case "$scenario" in
    pg-*)
      db="kassa_cmp_$(date +%s%N)"
      psql "$PG_URL/postgres" -qc "CREATE DATABASE $db" >/dev/null
      url=(--database-url "$PG_URL/$db")
      ;;
  esac
  "$tree_bin" bench --server-bin "$server_bin" --buyers "$BUYERS" --seconds "$SECONDS_PER_RUN" "${mode[@]}" \
    "${url[@]}" --json "$json" >/dev/null 2>"$out/$scenario-$side-$n.err" || {
    echo "run $scenario ($side) failed:" >&2
    cat "$out/$scenario-$side-$n.err" >&2
    if [ -n "$db" ]; then psql "$PG_URL/postgres" -qc "DROP DATABASE $db WITH (FORCE)" >/dev/null; fi
    exit 1
  }
  if [ -n "$db" ]; then psql "$PG_URL/postgres" -qc "DROP DATABASE $db WITH (FORCE)" >/dev/null; fi
}

# field JSON: confirms/s, p99 ms, oversold units and check violations of one report.
field() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
print("%.1f %.1f %d %s" % (r["confirms_per_s"], r["latency_ms"].get("p99", 0), r["oversold"], r.get("check_violations")))' "$1"
}

echo "REF ${ref_sha:0:12} against the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'))"
echo "$PAIRS pairs, $BUYERS buyers, ${SECONDS_PER_RUN} s a run, protections on (kassa's defaults)"
printf '%-16s %4s %12s %12s %8s %10s %10s\n' scenario pair "REF /s" "tree /s" ratio "REF p99" "tree p99"
status=0
for scenario in $SCENARIOS; do
  ratios=()
  for n in $(seq 1 "$PAIRS"); do
    if [ $((n % 2)) = 1 ]; then order="ref tree"; else order="tree ref"; fi
    declare -A got=()
    for side in $order; do
      run "$side" "$scenario" "$n"
      got[$side]="$(field "$out/$scenario-$side-$n.json")"
    done
    read -r ref_rate ref_p99 ref_over ref_check <<<"${got[ref]}"
    read -r tree_rate tree_p99 tree_over tree_check <<<"${got[tree]}"
    ratio="$(python3 -c "import sys; print('%.3f' % (float(sys.argv[2]) / max(float(sys.argv[1]), 1e-9)))" "$ref_rate" "$tree_rate")"
    ratios+=("$ratio")
    printf '%-16s %4s %12s %12s %8s %10s %10s\n' "$scenario" "$n" "$ref_rate" "$tree_rate" "$ratio" "$ref_p99" "$tree_p99"
    for side in ref tree; do
      read -r _ _ over check <<<"${got[$side]}"
      if [ "$over" != 0 ] || [ "$check" != 0 ]; then
        echo "  $side: $over oversold units, kassa check: $check violations" >&2
        status=1
      fi
    done
    unset got
  done
  median="$(printf '%s\n' "${ratios[@]}" | sort -n | python3 -c 'import sys; v=[float(x) for x in sys.stdin]; print("%.3f" % v[len(v)//2] if len(v)%2 else "%.3f" % ((v[len(v)//2-1]+v[len(v)//2])/2))')"
  printf '%-16s %4s %12s %12s %8s\n' "$scenario" median "" "" "$median"
done
exit "$status"
