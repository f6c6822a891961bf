#!/usr/bin/env bash
# Renews the README's screenshots of the buyer pages: runs the browser test that visits them in
# both languages at 360 and 1280 px (Chromium, chromedriver and a CJK font installed, as .ci/run
# installs them) and copies the ones the README shows into docs/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --test api browser::buyer_pages_fit_a_phone_and_a_desktop_in_both_languages -- --exact
shots=test-artifacts/screenshots
for name in zh-360-basket zh-360-qr en-360-return zh-360-order en-360-error-payment-expired \
  zh-360-error-price-changed; do
  cp "$shots/$name.png" "docs/screenshots/buyer-$name.png"
done
cp "$shots/en-1280-storefront.png" docs/screenshots/storefront.png
echo "docs/screenshots/ renewed"
