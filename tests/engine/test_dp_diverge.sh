#!/usr/bin/env bash
# The collective ledger in the engine: ranks whose backward releases two
# blocks of one size in another order on one rank (their reduce-scatters
# have one count, so the transport pairs block 1 with block 2 and says
# nothing) must every one stop in that step, each naming the first
# collective that differs, within the collective timeout: at 2 and 3 ranks,
# in the modes that reduce-scatter (optimizer) and that gather the weights
# too (params). test_dp's "diverge" case prints one verdict line per rank.
# Usage: test_dp_diverge.sh MPIRUN TEST_DP
set -u
mpirun=$1
test_dp=$2
source "$(dirname "$0")/../train/tap.sh"
export FERRY_COMM_TIMEOUT=${FERRY_COMM_TIMEOUT:-60}
for np in 2 3; do
  for mode in optimizer params; do
    start=$SECONDS
    out=$(timeout 180 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np $np "$test_dp" diverge $mode 2>&1)
    rc=$?
    named=$(grep -c '^verdict rank [0-9]*: named' <<<"$out")
    [ $rc -ne 124 ] && [ "$named" -eq $np ]
    ok $? "$np ranks, offload $mode, the last rank's blocks 1 and 2 released in the other order: all $np ranks stop naming the collective ($named did; exit $rc after $((SECONDS - start)) s): $(grep -m1 '^verdict' <<<"$out")"
    [ "$named" -eq $np ] || grep -E 'verdict|rror' <<<"$out" | head -8 | sed 's/^/# /'
  done
done
finish
