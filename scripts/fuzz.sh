#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS, default 60) with libFuzzer and prints
# how many executions each made. Needs a nightly toolchain (for the sanitizer) and cargo-fuzz:
#   rustup toolchain install nightly && cargo install cargo-fuzz
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
for target in sandbox_notification request_bodies money_and_ids; do
  log="$(mktemp)"
  # -rss_limit_mb bounds memory: an unbounded allocation on hostile input is a failure too.
  cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=1024 -malloc_limit_mb=256 >"$log" 2>&1 || {
    tail -40 "$log"; echo "fuzz target $target FAILED"; exit 1; }
  runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | tail -1 | grep -Eo '[0-9]+')
  echo "$target: ${runs:-?} executions in ${seconds}s, no crash"
done
