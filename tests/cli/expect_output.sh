#!/usr/bin/env bash
# Usage: expect_output.sh PATTERN... -- COMMAND [ARG...]
# Runs COMMAND and passes when it exits 0 and its stdout contains every PATTERN (fixed strings).
# Used for runs that must succeed, e.g. a checked bench whose footer is "# wrong: 0 OK".
set -u
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns+=("$1")
  shift
done
[ $# -gt 0 ] || { echo "expect_output.sh: missing -- before the command" >&2; exit 99; }
shift

out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out"
rc=$?
echo "command: $*"
cat "$out"
fail=0
[ "$rc" -eq 0 ] || { echo "FAIL: exit code $rc, want 0"; fail=1; }
for p in "${patterns[@]}"; do
  grep -qF -- "$p" "$out" || { echo "FAIL: stdout does not contain: $p"; fail=1; }
done
exit $fail
