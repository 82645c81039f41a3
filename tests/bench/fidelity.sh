#!/bin/sh
# The cost model against measurement, before and after probing this machine
# (docs/schedule.md, "Prediction against measurement"): gpt2-tiny on 1 and 2
# host ranks, the demo's gpt2-tiny-offload plan (parameters and optimizer
# state on NVMe) on 1 and 2 ranks, and gpt2-small's shape (examples/
# gpt2-small.zl at sequence 256, micro-batch 1, f32) on 1 rank for SMALL
# steps (default 3), each compiled twice, against the default
# description (examples/targets/host.zl with the rank count; the offload
# model's own host2 target) and against what zinfprobe measured (1 rank
# alone, 2 ranks under mpirun; zinfc reads it with no --target through
# ZINF_PROBE), run for a few steps. Prints measured / predicted step time
# and, for the queue busiest in the measurement, its measured / predicted
# busy time, then zinfdump --compare's largest divergences for the 2-rank
# gpt2-tiny run after the probe. With a PEER build (another checkout's,
# e.g. main before a change: git worktree add /tmp/before HEAD && make -C
# /tmp/before all), each plan is also compiled and run by the peer, one
# run after the other, so the two rows of a plan saw the same machine; the
# peer plans with its own probe's file (a probe file of one build may have
# figures another does not read). Each plan is also compiled on the target
# zinfdump --calibrate took from its probed run's trace (row
# NAME-calibrated) and run again.
#   sh tests/bench/fidelity.sh BUILD [STEPS] [PEER] [SMALL]
B=${1:-build}
STEPS=${2:-12}
PEER=${3:-}
SMALL=${4:-3}
W=$(mktemp -d /tmp/zinf-fidelity.XXXXXX)
trap 'rm -rf "$W"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMP_NUM_THREADS=1
for x in zinfc zinfrun zinfprobe zinftok zinfdump; do
  [ -x "$B/bin/$x" ] || { echo "no $B/bin/$x: build first"; exit 1; }
  [ -z "$PEER" ] || [ -x "$PEER/bin/$x" ] || { echo "no $PEER/bin/$x: build the peer first"; exit 1; }
done
TEXT=$(ls /usr/share/common-licenses/GPL-3 README.md 2>/dev/null | head -1)
"$B/bin/zinftok" "$TEXT" -o "$W/train.bin" > /dev/null || exit 1
mkdir -p "$W/nvme" "$W/probe-nvme"

echo "probing: 1 rank, then 2 ranks under mpirun"
"$B/bin/zinfprobe" --host --nvme "$W/probe-nvme" -o "$W/probe1.zl" > "$W/probe1.log" 2>&1 || { cat "$W/probe1.log"; exit 1; }
mpirun -np 2 --oversubscribe "$B/bin/zinfprobe" --host --nvme "$W/probe-nvme" -o "$W/probe2.zl" < /dev/null > "$W/probe2.log" 2>&1 ||
  { cat "$W/probe2.log"; exit 1; }
if [ -n "$PEER" ]; then
  echo "probing with the peer's zinfprobe"
  "$PEER/bin/zinfprobe" --host --nvme "$W/probe-nvme" -o "$W/peerprobe1.zl" > "$W/peerprobe1.log" 2>&1 ||
    { cat "$W/peerprobe1.log"; exit 1; }
  mpirun -np 2 --oversubscribe "$PEER/bin/zinfprobe" --host --nvme "$W/probe-nvme" -o "$W/peerprobe2.zl" < /dev/null \
    > "$W/peerprobe2.log" 2>&1 || { cat "$W/peerprobe2.log"; exit 1; }
fi
grep -v '^#' "$W/probe2.zl"
grep -h 'steal' "$W/probe1.log" "$W/probe2.log"

# run NAME RANKS PLAN [BUILD] [STEPS]: trains STEPS steps; prints one row
run() {
  name=$1 ranks=$2 plan=$3 R=${4:-$B} nsteps=${5:-$STEPS}
  if [ "$ranks" -gt 1 ]; then L="mpirun -np $ranks --oversubscribe"; else L=; fi
  rm -rf "$W/nvme"/*
  $L "$R/bin/zinfrun" "$plan" --data "$W/train.bin" --steps "$nsteps" --nvme "$W/nvme" --quiet \
    --trace "$W/$name.json" < /dev/null > "$W/$name.log" 2>&1 || { echo "FAIL: $name"; cat "$W/$name.log"; return 1; }
  grep -A1 '^warning: other machines' "$W/$name.log" | sed "s/^/$name: /"
  awk -v name="$name" '
    /^done:/ { for (i = 1; i <= NF; i++) { if ($i == "ms/step" && $(i+1) == "measured,") m = $(i-1);
                                           if ($i == "ms/step" && $(i+1) == "predicted") p = $(i-1) } }
    /^queue busy per step/ { best = -1; cpu = 0
      for (i = 1; i <= NF; i++) if ($i ~ /^(nvme|h2d|d2h|comm|compute|cpu)$/) {
        mq = $(i+1); pq = $(i+2); gsub(/[()]/, "", pq)
        if ($i != "nvme") cpu += mq
        if (mq + 0 > best) { best = mq + 0; q = $i; qm = mq; qp = pq } } }
    END { r = p > 0 ? sprintf("%.2f", m / p) : "-"; qr = qp > 0 ? sprintf("%.2f", qm / qp) : "-"
          printf "%-28s %9.1f %9.1f %7s   %-8s %8.1f %8.1f %7s %9.2f %9.2f %8.2f\n", name, m, p, r, q, qm, qp, qr, (qm > 0 ? m / qm : 0),
                 (qp > 0 ? p / qp : 0), (cpu > 0 ? m / cpu : 0) }
  ' "$W/$name.log"
}

# the arguments with BUILD's probe files replaced by the peer's
peer_args() { for a; do printf '%s\n' "$a" | sed "s#$W/probe\([12]\)#$W/peerprobe\1#"; done; }
plan() { # NAME MODEL [ARGS...]: compiles (and the peer's NAME-peer); quiet unless it fails
  n=$1; shift
  "$B/bin/zinfc" "$@" -o "$W/$n.plan" > "$W/$n.zc" 2>&1 || { echo "FAIL: zinfc $*"; cat "$W/$n.zc"; exit 1; }
  [ -z "$PEER" ] || ZINF_PROBE=$(peer_args "${ZINF_PROBE:-none}") "$PEER/bin/zinfc" $(peer_args "$@") -o "$W/$n-peer.plan" \
    > "$W/$n-peer.zc" 2>&1 || { echo "FAIL: peer zinfc $*"; cat "$W/$n-peer.zc"; exit 1; }
}
sed "s/ranks = [0-9]*/ranks = 1/" examples/targets/host.zl > "$W/host1.zl"
sed "s/ranks = [0-9]*/ranks = 2/" examples/targets/host.zl > "$W/host2.zl"
cp examples/gpt2-tiny.zl "$W/" && sed "s/ranks = 2/ranks = 1/" examples/gpt2-tiny-offload.zl > "$W/offload1.zl"
sed "s/T = 1024,/T = 256,/; s/micro_batch = 8/micro_batch = 1/; s/dtype = bf16/dtype = f32/" examples/gpt2-small.zl > "$W/small.zl"
plan tiny1-default examples/gpt2-tiny.zl --target "$W/host1.zl"
plan tiny2-default examples/gpt2-tiny.zl --target "$W/host2.zl"
plan offload1-default "$W/offload1.zl"
plan offload2-default examples/gpt2-tiny-offload.zl
plan small1-default "$W/small.zl" --target "$W/host1.zl"
ZINF_PROBE="$W/probe1.zl" plan tiny1-probed examples/gpt2-tiny.zl
ZINF_PROBE="$W/probe2.zl" plan tiny2-probed examples/gpt2-tiny.zl
grep -h '^target:' "$W/tiny1-probed.zc" "$W/tiny2-probed.zc"
plan offload1-probed "$W/offload1.zl" --target "$W/probe1.zl"
plan offload2-probed examples/gpt2-tiny-offload.zl --target "$W/probe2.zl"
plan small1-probed "$W/small.zl" --target "$W/probe1.zl"

echo
echo "$STEPS steps each; step: ms per step (zinfrun's mean); queue: the busiest measured queue, its busy ms per step"
[ -z "$PEER" ] || echo "rows NAME-peer: the same plan compiled and run by $PEER, just before the row of $B"
echo "rows NAME-calibrated: planned on the target zinfdump --calibrate took from the NAME-probed run's trace, run again"
echo "step/queue: the measured step over that queue's measured busy time; (planned): the same in the prediction, the overlap the plan"
echo "  itself promises (a runtime that keeps it has step/queue near it)"
echo "step/cpu: the step over the rank's CPU busy time (every queue's busy ms but NVMe's: on the host backend they share the rank's cores)"
printf "%-28s %9s %9s %7s   %-8s %8s %8s %7s %9s %9s %8s\n" "plan" "measured" "predicted" "ratio" "queue" "measured" "predict" "ratio" "step/queue" "(planned)" "step/cpu"
status=0
for c in tiny1:1 tiny2:2 offload1:1 offload2:2 small1:1; do
  n=${c%%:*} r=${c##*:} k=$STEPS
  [ "$n" = small1 ] && k=$SMALL # a step of gpt2-small takes seconds here
  for v in default probed; do
    [ -z "$PEER" ] || run "$n-$v-peer" "$r" "$W/$n-$v-peer.plan" "$PEER" "$k" || status=1
    run "$n-$v" "$r" "$W/$n-$v.plan" "$B" "$k" || status=1
  done
  # the probed run's own kernel and collective times as the target (zinfdump --calibrate), and a run planned on it
  case $n in
    tiny*) model=examples/gpt2-tiny.zl ;; offload1) model=$W/offload1.zl ;; offload2) model=examples/gpt2-tiny-offload.zl ;;
    small1) model=$W/small.zl ;;
  esac
  if "$B/bin/zinfdump" "$W/$n-probed.plan" --compare "$W/$n-probed.json" --calibrate "$W/$n-cal.zl" > "$W/$n-cal.out" 2>&1 &&
     "$B/bin/zinfc" "$model" --target "$W/$n-cal.zl" -o "$W/$n-calibrated.plan" > "$W/$n-calibrated.zc" 2>&1; then
    run "$n-calibrated" "$r" "$W/$n-calibrated.plan" "$B" "$k" || status=1
  else
    echo "FAIL: calibrating $n"; tail -3 "$W/$n-cal.out" "$W/$n-calibrated.zc"; status=1
  fi
done
echo
echo "where the 2-rank gpt2-tiny prediction after the probe still differs (zinfdump --compare, rank 0):"
"$B/bin/zinfdump" "$W/tiny2-probed.plan" --compare "$W/tiny2-probed.json" 2>&1 | sed -n '1,12p'
echo
echo "offload on 2 ranks after the probe:"
"$B/bin/zinfdump" "$W/offload2-probed.plan" --compare "$W/offload2-probed.json" 2>&1 | sed -n '1,12p'
exit $status
