#!/bin/bash
# Prepared in v43, NOT RUN YET: the two-GPU measurements (issue 12 point 5: the copy-engine path
# against the SM path at the same SM budget, to choose the default; issue 13's two-GPU decode
# figures), on nvidia-h200-x2, in four calls of under 10 minutes each, back to back so that the
# machine stays warm and the build is kept (a cold machine builds again, about a minute):
#   bash docs/results/v43-one-h200/next-x2.sh A   (build, sm-path: 12 pairs x 8/16/32 SMs x 128/4096)
#   bash docs/results/v43-one-h200/next-x2.sh B   (copy-engine: the same with --copy-engine)
#   bash docs/results/v43-one-h200/next-x2.sh C   (link floors, decode)
#   bash docs/results/v43-one-h200/next-x2.sh D   (nodes-net, nodes-net-decode, mpi, ctest-multi)
# Not timed before: a checked bench configuration took about 3.5 s at world size 1 (v39 run H);
# if A or B reaches its 570 s limit, the rows printed so far are in its log.
# Each part runs scripts/multi-gpu-bench --steps with its logs in /tmp, then packs them into
# $OUT/x2-<part>.tgz (the device returns at most 8 files) and prints each bench's table.
set -u
part=${1:?part A, B, C or D}
case $part in
  A) steps=sm-path ;;
  B) steps=copy-engine ;;
  C) steps=link-floor,link-floor-local,decode ;;
  D) steps=nodes-net,nodes-net-decode,mpi,ctest-multi ;;
  *) echo "part A, B, C or D, not '$part'" >&2; exit 2 ;;
esac
T0=$(date +%s)
logs=/tmp/x2-$part
rm -rf "$logs" && mkdir -p "$logs"
nvidia-smi -L; nvidia-smi topo -m
OUT="$logs" timeout 570 scripts/multi-gpu-bench --steps "$steps" > "$logs/driver.log" 2>&1
echo "multi-gpu-bench rc $? after $(( $(date +%s) - T0 )) s"
grep -E "FAILED|passed|error" "$logs/driver.log" | tail -5
for f in "$logs"/*.log; do
  case $(basename "$f") in configure.log|build.log|driver.log) continue ;; esac
  echo "== $(basename "$f")"
  grep -E "^ +[0-9]+ +[a-z0-9]+ +[a-z0-9_]+ +[0-9]|wrong|GB/s|tests passed|FAIL" "$f" | cut -c1-150 | head -80
done
tar czf "$OUT/x2-$part.tgz" -C "$logs" .
