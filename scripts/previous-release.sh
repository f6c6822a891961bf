#!/usr/bin/env bash
# Builds the previous release's kassa binary from this repository's history, for the rolling-upgrade
# test (tests/api/rolling.rs): a fleet upgrading runs it beside the new binary on the new schema.
# Prints the binary's path; `export KASSA_PREVIOUS_BIN=$(scripts/previous-release.sh)` before
# `cargo test` runs the test, which is otherwise ignored with the reason.
#
# The previous release is the commit tagged with it; the tag may not travel with every clone, so its
# commit is named here as well. Move both on a release (see docs/operations.md, "Releasing").
set -euo pipefail
cd "$(dirname "$0")/.."

RELEASE=0.1.0
COMMIT=8938f1d8def0d306df5d51b871a3809d282f02a7

if ! git cat-file -e "${COMMIT}^{commit}" 2>/dev/null; then
  echo "previous-release: commit ${COMMIT} (kassa ${RELEASE}) is not in this clone's history;" \
    "a shallow clone cannot build it (git fetch --unshallow)" >&2
  exit 1
fi

target="${CARGO_TARGET_DIR:-$PWD/target}"
root="${target}/previous-release"
src="${root}/kassa-${RELEASE}"
bin="${root}/build/debug/kassa"
stamp="${root}/built-from"

if [[ -x "${bin}" && -f "${stamp}" && "$(cat "${stamp}")" == "${COMMIT}" ]]; then
  echo "${bin}"
  exit 0
fi

rm -rf "${src}"
mkdir -p "${src}"
git archive "${COMMIT}" | tar -x -C "${src}"
# Its own target dir, outside its source; a debug build is enough to speak the protocol and is the
# quicker one to build.
echo "previous-release: building kassa ${RELEASE} (${COMMIT:0:12})" >&2
CARGO_PROFILE_DEV_DEBUG=0 cargo build --locked --bin kassa --manifest-path "${src}/Cargo.toml" --target-dir "${root}/build" >&2
echo "${COMMIT}" >"${stamp}"
echo "${bin}"
