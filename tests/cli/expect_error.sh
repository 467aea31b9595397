#!/usr/bin/env bash
# Usage: expect_error.sh RC PATTERN... -- COMMAND [ARG...]
# Runs COMMAND and passes when it exits with exactly RC, writes nothing to stdout and exactly one
# line to stderr, and that line contains every PATTERN (fixed strings). This is the contract of
# a bad argument in `moe-ep` (docs/bench.md): exit 2, one line naming the argument, value and rule.
set -u
want_rc=$1
shift
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns+=("$1")
  shift
done
[ $# -gt 0 ] || { echo "expect_error.sh: missing -- before the command" >&2; exit 99; }
shift

out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$@" >"$out" 2>"$err"
rc=$?
echo "command: $*"
echo "exit code: $rc (want $want_rc)"
echo "stderr:"; cat "$err"
fail=0
[ "$rc" -eq "$want_rc" ] || { echo "FAIL: exit code $rc, want $want_rc"; fail=1; }
lines=$(wc -l <"$err")
[ "$lines" -eq 1 ] || { echo "FAIL: $lines stderr lines, want exactly 1"; fail=1; }
[ ! -s "$out" ] || { echo "FAIL: stdout is not empty:"; cat "$out"; fail=1; }
for p in "${patterns[@]}"; do
  grep -qF -- "$p" "$err" || { echo "FAIL: stderr does not contain: $p"; fail=1; }
done
exit $fail
