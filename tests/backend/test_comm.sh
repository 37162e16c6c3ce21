#!/usr/bin/env bash
# Ranks under mpirun (comm_ranks, one scenario a run), judged together:
# collectives summed right and ledgers alike over three steps; a writer
# slower than the collective timeout that shows progress is not a death;
# a rank that issues another group's collectives is caught by the ledger
# on every rank, which names the first collective that differs; a rank
# stopped (SIGSTOP) or killed (SIGKILL) in a collective, and one stopped
# while no collective is in flight, makes every other rank fail within
# FERRY_COMM_TIMEOUT + 10 s, naming it, the collective and its age, and
# wakes a thread that waits where no collective can reach; a writer that
# shows no progress fails the others after FERRY_COMM_SAVE_TIMEOUT, not
# before; invalid timeouts are refused at join with a sentence. With the
# simulated device (a second program): the same through NCCL, a rank whose
# communicator start fails (fault injection) or comes past the timeout,
# and two ranks on the simulator's one GPU refused unless asked for.
# Usage: test_comm.sh host COMM_RANKS MPIRUN
#        test_comm.sh cuda COMM_RANKS_SIM MPIRUN
set -u
backend=$1
prog=$2
mpirun=$3
work=$(mktemp -d /tmp/ferry-comm-XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../train/tap.sh" # ok STATUS TEXT, finish
export OMPI_MCA_btl_vader_single_copy_mechanism=none # no cross-process reads: containers forbid them
export T=${FERRY_TEST_COMM_TIMEOUT:-3}
unset FERRY_COMM_TIMEOUT FERRY_COMM_SAVE_TIMEOUT
export FERRY_SHARE_GPUS=1 # the simulator has one GPU (refused without it: the last cases)
# On the simulated device, the cases whose paths differ there (NCCL's
# events, its abort, its start); the rest is the host backend's run.
if [ "$backend" = cuda ]; then ranks=2; else ranks="2 3"; fi

# launch NAME NP SCENARIO [mpirun flags]: runs the ranks (at most 60 s), output in $work/NAME.
launch() {
  local name=$1 np=$2 scenario=$3
  shift 3
  FERRY_COMM_TIMEOUT=${FERRY_COMM_TIMEOUT:-$T} timeout 60 "$mpirun" --allow-run-as-root --oversubscribe \
    --bind-to none -x FERRY_COMM_TIMEOUT -x FERRY_COMM_SAVE_TIMEOUT -x FERRY_SHARE_GPUS "$@" -np "$np" \
    "$prog" "$backend" "$scenario" >"$work/$name" 2>&1
  local rc=$?
  date +%s.%N >"$work/$name.end"
  return $rc
}
# The scenarios run side by side: each mostly waits out the timeouts it
# tests (one after another they took 56 s on the host backend, 27 s on the
# simulated device, at 6% of two cores), and each is judged against its own
# clock (a rank's failure within T + 10 s of the last rank stopping). They
# start a second apart, so that no two jobs' starts (MPI's, ASan's) pile
# up on the cores while another job's ranks must answer within T.
# start NAME NP SCENARIO [mpirun flags]: launch in the background; its exit
# status lands in $work/NAME.rc, which rc_of reads once `wait` returned.
stagger=1
start() {
  local name=$1
  { launch "$@"; echo $? >"$work/$name.rc"; } &
  sleep "$stagger"
}
rc_of() { cat "$work/$1.rc" 2>/dev/null || echo 255; }
# The time a rank said WORDS at: "rank R: WORDS 1796417120.670 ..."
said_at() { sed -n "s/^rank $2: $3 \([0-9.]*\).*/\1/p" "$work/$1" | head -1; }
# a - b <= c, in seconds with decimals
within() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { exit !(a != "" && b != "" && a - b <= c && a - b >= 0) }'; }
line() { grep -m1 "^rank $2: $3" "$work/$1" | cut -c1-400; }

# ---- every scenario under way, the longest first ----
for np in $ranks; do start ok$np $np ok; done
start diverge 3 diverge
for np in $ranks; do start stop$np $np stop; done
# Open MPI would end every rank at once when one is killed; with recovery
# on, the others live on and must find out for themselves.
for np in $ranks; do start kill$np $np kill --mca orte_enable_recovery 1; done
np_hang=${ranks##* }
start hang $np_hang hang
if [ "$backend" = host ]; then
  start idle 3 stop-idle
  FERRY_COMM_TIMEOUT=2 FERRY_COMM_SAVE_TIMEOUT=5s start stall 2 save-stall
  stagger=0 # refused at join: these end at once
  for bad in inf abc 0 -5 10x 1e300; do FERRY_COMM_TIMEOUT=$bad start "bad$bad" 2 ok; done
  FERRY_COMM_SAVE_TIMEOUT=0 start badsave 2 ok
fi
if [ "$backend" = cuda ]; then
  start late 3 start-hang
  FERRY_SHARE_GPUS=0 start share 2 ok
  { timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x FERRY_SHARE_GPUS \
      -x FERRY_COMM_TIMEOUT=$T -np 2 "$prog" cuda start-fail : -np 1 -x FERRY_CUDASIM_FAIL=ncclCommInitRankConfig:1 \
      "$prog" cuda start-fail >"$work/startfail" 2>&1; } &
fi
wait

# ---- ranks that behave ----
for np in $ranks; do
  rc=$(rc_of ok$np)
  hashes=$(sed -n 's/^rank [0-9]*: done: [0-9]* collectives, ledger \([0-9a-f]*\)$/\1/p' "$work/ok$np" | sort -u)
  [ $rc -eq 0 ] && [ "$(grep -c ': done: ' "$work/ok$np")" -eq $np ] && [ "$(echo "$hashes" | wc -l)" -eq 1 ]
  ok $? "$np ranks: three steps of collectives over groups of one size, summed right, every ledger alike ($hashes; exit $rc) $(grep -m1 'failed' "$work/ok$np")"
  took=$(sed -n 's/^rank 1: saved: the save took \([0-9.]*\) s.*/\1/p' "$work/ok$np")
  awk -v t="$took" -v T="$T" 'BEGIN { exit !(t != "" && t > 2 * T) }'
  ok $? "$np ranks: a checkpoint writer $took s slow (the collective timeout is $T s) that shows progress is no death"
done

# ---- a rank that issues another group's collectives ----
want="the first that differs is collective #[0-9]+: ranks 0, 1 issued an all-reduce of 'weights' \(4096 f32, group 2\); rank 2 issued an all-reduce of 'weights' \(4096 f32, group 3\)"
good=0
for r in 0 1 2; do
  grep -qF "rank $r: failed at" "$work/diverge" && grep "^rank $r: failed" "$work/diverge" | grep -Eq "$want" &&
    ! grep -q "^rank $r: step 1" "$work/diverge" || good=1
done
ok $good "a rank that reduces group 3 where the others reduce group 2 (same size) stops every rank in that step, each naming it: $(line diverge 0 failed)"

# ---- a rank stopped or killed ----
# judge NAME NP WHAT: every rank but the last failed within T + 10 s of the
# last one stopping, naming it (and, with a collective in flight, the
# collective and its age), its waiting thread woken, and exited in time.
judge() {
  local name=$1 np=$2 what=$3 last=$(($2 - 1)) bad=0 r stop t w x msg why
  stop=$(said_at "$name" $last "stopping at")
  for r in $(seq 0 $((np - 2))); do
    t=$(said_at "$name" $r "failed at")
    w=$(said_at "$name" $r "waker: the waiting thread woke at")
    x=$(said_at "$name" $r "exit at")
    [ -n "$x" ] || x=$(cat "$work/$name.end") # ended by mpirun once another rank exited: no later than mpirun
    msg=$(grep -m1 "^rank $r: failed at" "$work/$name")
    why=""
    within "$t" "$stop" $((T + 10)) || why+=" failed at $t, not within $T + 10 s of $stop;"
    within "$w" "$stop" $((T + 10)) || why+=" waiting thread woke at $w;"
    within "$x" "$stop" $((T + 10)) || why+=" exited at $x;"
    echo "$msg" | grep -Eq "waited [0-9]+ s for rank $last without an answer|rank $last sent no heartbeat for [0-9]+ s|without completing, waiting for rank $last" ||
      why+=" rank $last not named;"
    if [ "$what" = collective ]; then
      echo "$msg" | grep -Eq "collective #[0-9]+: 4096 f32, group 0\).* [0-9.]+ s" || why+=" no collective and age;"
    fi
    if [ -n "$why" ]; then
      bad=1
      echo "# $name, rank $r:$why"
      grep "^rank $r: " "$work/$name" | tail -4 | sed 's/^/#   /' | cut -c1-300
    fi
  done
  return $bad
}
for np in $ranks; do
  judge stop$np $np collective
  ok $? "$np ranks, the last stopped (SIGSTOP) before a collective: the others fail within $T + 10 s naming it, the collective and its age, their waiting threads woken: $(line stop$np 0 failed)"
done
for np in $ranks; do
  judge kill$np $np collective
  ok $? "$np ranks, the last killed (SIGKILL) before a collective: the others fail within $T + 10 s naming it, the collective and its age: $(line kill$np 0 failed)"
done
# Every rank alive, the last stuck in its own work: only the watchdog's
# bound on a collective's age ends the others' wait.
np=$np_hang
hung=$(said_at hang $((np - 1)) "hanging at")
bad=0
for r in $(seq 0 $((np - 2))); do
  within "$(said_at hang $r 'failed at')" "$hung" $((T + 10)) || bad=1
  grep "^rank $r: failed" "$work/hang" | grep -Eq "collective #[0-9]+: 4096 f32, group 0\) (waited [0-9]+ s for rank $((np - 1)) without an answer|has run on the device for [0-9]+ s without completing)" || bad=1
done
ok $bad "$np ranks, the last stuck in its own work with its heartbeat on time: the age of the others' collective fails them within $T + 10 s: $(line hang 0 failed)"

if [ "$backend" = host ]; then
judge idle 3 idle && grep "^rank 0: failed" "$work/idle" | grep -q "rank 2 sent no heartbeat"
ok $? "3 ranks, the last stopped while the others wait outside any collective: its heartbeat's silence fails them, and the wakers end their waits: $(line idle 0 failed)"

# ---- a checkpoint writer that shows no progress ----
begin=$(said_at stall 1 "save begins at"); t=$(said_at stall 1 "failed at")
within "$t" "$begin" 15 && ! within "$t" "$begin" 4.9 && grep "^rank 1: failed" "$work/stall" | grep -q "rank 0 wrote a checkpoint that showed no progress for [0-9]* s"
ok $? "a writer that shows no progress fails the others after FERRY_COMM_SAVE_TIMEOUT (5 s), not the collective timeout (2 s): $(line stall 1 failed)"

# ---- timeouts ----
for bad in inf abc 0 -5 10x 1e300; do
  rc=$(rc_of "bad$bad")
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "refused at join: FERRY_COMM_TIMEOUT='$bad' is refused: .*; give seconds, or a number with a unit: 90, 20s, 15m, 1.5h" "$work/bad$bad")" -eq 2 ]
  ok $? "FERRY_COMM_TIMEOUT=$bad is refused at join by every rank, saying why (exit $rc): $(grep -m1 refused "$work/bad$bad")"
done
rc=$(rc_of badsave)
[ $rc -ne 0 ] && grep -q "FERRY_COMM_SAVE_TIMEOUT='0' is refused: a timeout must be above zero" "$work/badsave"
ok $? "FERRY_COMM_SAVE_TIMEOUT=0 is refused at join (exit $rc): $(grep -m1 refused "$work/badsave")"
fi

# ---- the simulated device: NCCL's start ----
if [ "$backend" = cuda ]; then
  rc=$(rc_of share)
  [ $rc -ne 0 ] && [ "$(grep -c "on this machine, which shows 1 GPU: ranks would share a GPU.*or set FERRY_SHARE_GPUS=1 to share on purpose" "$work/share")" -eq 2 ]
  ok $? "two ranks on the simulator's one GPU are refused, saying what to do (exit $rc): $(grep -m1 'shows 1 GPU' "$work/share" | cut -c1-300)"
  good=0
  for r in 0 1; do
    grep "^rank $r: failed" "$work/late" | grep -q "did not start in [0-9]* s" || good=1
  done
  ok $good "3 ranks, the last starting its communicator past the timeout: the others' non-blocking start gives up, saying so: $(line late 0 failed)"
  good=0
  for r in 0 1; do
    grep "^rank $r: failed" "$work/startfail" | grep -q "rank 2 failed: ncclCommInitRankConfig (rank 2 of 3, communicator 'weights') failed" || good=1
  done
  ok $good "3 ranks, the last one's communicator start failing (fault injection): the others stop at once with its message: $(line startfail 0 failed)"
fi

finish
