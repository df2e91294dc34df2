#!/usr/bin/env bash
# Set up, build and run every test suite; ends with "N passed, N failed".
# Usage: scripts/test.sh [BUILD_DIR [meson setup options for a new BUILD_DIR...]]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true
scripts/setup.sh "$BUILD" "$@" || exit 1
# torch and pytest for the Python door's tests (suite 'python'; they skip
# without torch, and fail then under CI's STRATA_REQUIRE_TORCH=1)
scripts/setup-python.sh || echo "test.sh: scripts/setup-python.sh failed: the python tests" \
  "will skip" >&2
meson test -C "$BUILD" --print-errorlogs --num-processes 2
rc=$?
python3 scripts/test_summary.py "$BUILD/meson-logs/testlog.json"
exit $rc
