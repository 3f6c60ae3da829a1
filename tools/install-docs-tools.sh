#!/usr/bin/env bash
# The Debian packages the docs' checks draw with:
#   fonts-noto-cjk  a CJK font, for the Chinese words in the figures (docs/tour/sentence.png,
#                   causal_row.png) and the notebooks' plots; without one they are labelled
#                   in English;
#   chromium        the headless browser tools/notebook_screenshot.py looks at an executed
#                   notebook with (tests/test_notebooks.py skips that check without it).
# Idempotent: installs only what is missing.
set -euo pipefail
need=()
fc-list 2>/dev/null | grep -qi -E "Noto (Sans|Serif) CJK|WenQuanYi|Source Han" || need+=(fonts-noto-cjk)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then
    echo "docs tools: a CJK font and chromium are installed"
    exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
echo "docs tools: installed ${need[*]}"
