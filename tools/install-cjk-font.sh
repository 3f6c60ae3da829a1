#!/usr/bin/env bash
# A CJK font for the figures' Chinese labels (the sentence's words in
# docs/tour/sentence.png and causal_row.png, and the notebooks' plots):
# Debian's fonts-noto-cjk.  Without it the figures label the words in English.
# Idempotent: does nothing when a CJK font is already installed.
set -euo pipefail
if fc-list 2>/dev/null | grep -qi -E "Noto (Sans|Serif) CJK|WenQuanYi|Source Han"; then
    echo "a CJK font is installed"
    exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
$sudo apt-get install -y -qq fonts-noto-cjk
fc-list | grep -qi "Noto Sans CJK" && echo "installed fonts-noto-cjk"
