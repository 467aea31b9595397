#!/usr/bin/env bash
# Usage: expect_mpi.sh ok|fail PATTERN... -- MPIRUN NP COMMAND [ARG...]
# Runs COMMAND under `MPIRUN -np NP` (Open MPI: allowed as root, oversubscribed, shared memory
# only; another MPI's mpirun gets -np alone) and passes when the run succeeds (ok) or fails (fail) and its output (stdout and stderr
# together: every process's lines, and mpirun's own) contains every PATTERN (fixed strings).
# Used by the `moe-ep bench` tests of one rank per process (docs/bench.md).
set -u
want=$1
shift
patterns=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns+=("$1")
  shift
done
[ $# -gt 2 ] || { echo "expect_mpi.sh: want -- MPIRUN NP COMMAND" >&2; exit 99; }
shift
mpirun=$1 np=$2
shift 2

out=$(mktemp)
trap 'rm -f "$out"' EXIT
extra=()
"$mpirun" --version 2>&1 | grep -q "Open MPI" && extra=(--oversubscribe)
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
  timeout 120 "$mpirun" "${extra[@]}" -np "$np" "$@" >"$out" 2>&1
rc=$?
echo "command: $mpirun -np $np $*"
echo "exit code: $rc (want $want)"
cat "$out"
fail=0
case $want in
  ok) [ "$rc" -eq 0 ] || { echo "FAIL: exit code $rc, want 0"; fail=1; } ;;
  fail) [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: exit code $rc, want a failure (not a timeout)"; fail=1; } ;;
  *) echo "expect_mpi.sh: want ok or fail, got $want" >&2; exit 99 ;;
esac
for p in "${patterns[@]}"; do
  grep -qF -- "$p" "$out" || { echo "FAIL: output does not contain: $p"; fail=1; }
done
exit $fail
