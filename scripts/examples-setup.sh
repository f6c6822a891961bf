#!/usr/bin/env bash
# Prepares what the shop examples need (tests/api/examples.rs), offline from then on:
#   - target/examples-venv: a Python with openapi-python-client (and the httpx and attrs its
#     generated client uses), which generates examples/python-shop/kassa_client from /openapi.json;
#   - examples/node-shop/node_modules: openapi-typescript, openapi-fetch and TypeScript, as
#     package-lock.json pins them.
# Then `KASSA_EXAMPLES=1 cargo test` runs both examples against a real kassa.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x target/examples-venv/bin/openapi-python-client ]; then
  python3 -m venv target/examples-venv
  target/examples-venv/bin/pip install --quiet --disable-pip-version-check "openapi-python-client>=0.26,<1"
fi
(cd examples/node-shop && npm ci --no-audit --no-fund --loglevel=error)
