#!/usr/bin/env bash
# Install archaudit, fetch the pinned flashinfer + sglang wheels, and scan them for an RTX PRO 6000 (sm_120).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
SP=$(.venv/bin/python bench/corpus.py fi072)
.venv/bin/archaudit scan "$SP" --target "${TARGET:-sm_120}" "$@"
