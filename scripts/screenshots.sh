#!/usr/bin/env bash
# Renews the README's screenshots (docs/screenshots/*.png) and their outlines (*.layout.txt): runs
# the browser tests (Chromium, chromedriver and a CJK font installed, as .ci/run installs them)
# with KASSA_RENEW_SCREENSHOTS=1, so each README picture is taken again from the page it shows.
# Without it the same tests fail when a page's outline no longer matches its committed picture.
set -euo pipefail
cd "$(dirname "$0")/.."
KASSA_RENEW_SCREENSHOTS=1 cargo test --test api browser::
echo "docs/screenshots/ renewed"
