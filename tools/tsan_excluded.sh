#!/usr/bin/env bash
# Prints the ctest regular expression of the tests `make tsan` leaves out: the names listed in
# tools/tsan_excluded.txt (its format is at the top of that file). With no entry, a regex that
# matches no test (ctest -E "" would exclude them all).
set -euo pipefail
list="$(dirname "$0")/tsan_excluded.txt"
names=$( (grep -v '^[[:space:]]*\(#\|$\)' "$list" || true) | awk '{print $1}' | paste -sd'|' -)
if [ -z "$names" ]; then
  echo '^$'
else
  echo "^($names)\$"
fi
