#!/usr/bin/env bash
# Time from a fresh clone to the first result printed. Clones this repository, then runs the
# README's quick start verbatim in a throwaway overlay of this machine from which bubblewrap, g++
# and Python's venv module and headers are purged (tests/fresh/fresh_root.sh), and stamps every
# line of output with the seconds since the clone began. Root on Debian or Ubuntu.
#   usage: bash benchmarks/first_result.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=${EPOCHREALTIME/./}
stamp() {   # each line with the seconds since the clone began
  while IFS= read -r line; do
    tenths=$(( (${EPOCHREALTIME/./} - start) / 100000 ))
    printf '[%5d.%d s] %s\n' $((tenths / 10)) $((tenths % 10)) "$line"
  done
}
{
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
  git clone -q "$repo" "$work/clone"
  command=$(awk '/^## Quick start/ { found = 1 } found && /^```bash/ { getline; print; exit }' "$work/clone/README.md")
  python=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  echo "cloned; running: $command"
  bash "$repo/tests/fresh/fresh_root.sh" "$work/scratch" "$work/clone" \
    "bubblewrap g++ python$python-venv python$python-dev" "$command" 2>&1
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
} | stamp
