#!/bin/sh
# Adam's moments stored compactly (train { optimizer = adam(state = "bf16")
# or "8bit" }, docs/training.md "Adam's moments"):
# - one step of the CPU Adam (tests/tools/adam_state, 136072 elements: 67
#   blocks of 2048 and a short one, two threads, the scalar path and the
#   best this processor has) equals a numpy reference of the same scheme
#   bit for bit (tests/e2e/optim_state.py: bitsandbytes' dynamic maps built
#   with torch as its create_dynamic_map does, f32 fused multiply-adds,
#   bf16 rounded to nearest even), three steps running, gradients over nine
#   decades, a zero block;
# - 200 steps of gpt-micro on the host: the mean loss of the last 20 steps
#   within 2% of the fp32 moments' run;
# - --explain counts the moments' bytes; tiles that are not whole blocks
#   of 8-bit moments are refused;
# - a checkpoint at step 3 resumes to step 6 bit for bit (2 ranks), and
#   resharded onto 1 and 4 ranks and onto a plan with the MLP weights in 2
#   tiles equals the straight run within reshard.sh's 1e-5 relative;
# - a checkpoint of 8-bit moments does not resume into a plan of f32 ones;
# - the CUDA backend on the fake driver, the GPU Adam's bf16 and 8-bit
#   kernels on the emulator, equals the host backend (relative 2e-4).
#   sh tests/e2e/optim_state.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_bin zinfc zinfrun zinftok
e2e_need_py numpy torch
[ -x "$B/tools/adam_state" ] || e2e_skip "$B/tools/adam_state is not built"
e2e_workdir optim_state
e2e_mpi
PY="$ZINF_PY tests/e2e/optim_state.py"

# ---- one step against the numpy reference ----
# one Python for the 18 steps (optim_state.py steps: its make, grad and check around each run of
# adam_state; importing torch, for the maps, takes seconds), one verdict line for each storage and path
$PY steps "$B/tools/adam_state" "$W" 136072 7 > "$W/steps.out" 2>&1
grep -v '^result ' "$W/steps.out" | sed 's/^/    /'
for st in fp32 bf16 8bit; do
  for isa in scalar auto; do
    r=$(awk -v s=$st -v i=$isa '$1 == "result" && $2 == s && $3 == i { print $4, $5 }' "$W/steps.out")
    case $r in
      "ok ") ok "$st moments, $isa: 3 steps equal the numpy reference bit for bit" ;;
      "inputs ") bad "making the inputs" ;;
      "step "[123]) bad "$st moments, $isa: $r differs from the reference" ;;
      *) bad "$st moments, $isa: no verdict from optim_state.py steps"; tail -n 5 "$W/steps.out" ;;
    esac
  done
done

# ---- training ----
"$B/bin/zinftok" README.md -o "$W/train.bin" > /dev/null || exit 1
# plan NAME RANKS MICRO_BATCH STATE "PLAN BLOCK"
plan() {
  sed -e "s/ranks = 4/ranks = $2/" -e "s/target host {/target host$2 {/" examples/targets/host.zl > "$W/t$1.zl"
  sed -e "s/micro_batch = 2/micro_batch = $3/" -e "s/weight_decay = 0.1)/weight_decay = 0.1, state = \"$4\")/" \
      -e "s/^train {/plan { $5 }\ntrain {/" tests/e2e/models/gpt-micro.zl > "$W/$1.zl"
  "$B/bin/zinfc" "$W/$1.zl" -I tests/e2e/models --target "$W/t$1.zl" --explain -o "$W/$1.plan" > "$W/$1.explain" 2>&1 ||
    { bad "zinfc $1"; sed 's/^/    | /' "$W/$1.explain"; exit 1; }
}
for st in fp32 bf16 8bit; do plan s1-$st 1 2 $st 'whole_below = 1000'; done
plan p2 2 2 8bit 'whole_below = 1000'
plan p1 1 4 8bit 'whole_below = 1000'
plan p4 4 1 8bit 'whole_below = 1000'
plan q2 2 2 8bit 'optimizer = "cpu"; whole_below = 1000; tiles "*.mlp.w*" = 2'
plan f2 2 2 fp32 'whole_below = 1000'
plan b2 2 2 bf16 'whole_below = 1000'

# --explain: gpt-micro's moments (85760 parameters; wte and the 4 block weights, 61440 of them, in 8 bits)
if grep -q "^momentum (dyn8) .* 1.0[0-9][0-9] .*" "$W/s1-8bit.explain" && grep -q "^variance (udyn8)" "$W/s1-8bit.explain" &&
   grep -q "^momentum (bf16) *2 " "$W/s1-bf16.explain" && grep -q "^momentum (f32) *4 " "$W/s1-fp32.explain"; then
  ok "--explain counts the moments as stored: $(grep '^momentum' "$W/s1-8bit.explain" | tr -s ' ' | cut -d' ' -f1-5)"
else bad "--explain's momentum rows"; grep -E "^(momentum|variance)" "$W"/s1-*.explain | sed 's/^/    | /'; fi

# tiles of 8-bit moments are whole blocks: 16 tiles of the [64, 256] MLP weights (1024 elements) are refused
sed -e 's/^plan { whole_below = 1000 }/plan { whole_below = 1000; tiles "*.mlp.w*" = 16 }/' "$W/s1-8bit.zl" > "$W/t16.zl"
if ! "$B/bin/zinfc" "$W/t16.zl" -I tests/e2e/models --target "$W/ts1-8bit.zl" -o "$W/t16.plan" > "$W/out" 2>&1 &&
   grep -q "error: cannot cut 'block.0.mlp.w1' into 16 tiles: its 8-bit Adam moments need tiles of whole blocks of 2048 elements, and a tile has 1024" "$W/out"; then
  ok "tiles that are not whole blocks of 8-bit moments are refused, naming the weight"
else bad "16 tiles of 8-bit moments"; sed 's/^/    | /' "$W/out"; fi

mkdir -p "$W/nvme"
run() { np=$1; shift; timeout 120 mpirun -np "$np" --oversubscribe "$B/bin/zinfrun" "$@" --data "$W/train.bin" --nvme "$W/nvme" < /dev/null > "$W/out" 2>&1; }

# 200 steps on 1 rank: the last 20 steps' mean loss within 2% of the fp32 moments'
for st in fp32 bf16 8bit; do
  run 1 "$W/s1-$st.plan" --steps 200 --losses "$W/l200-$st" --quiet || bad "200 steps, $st moments"
done
for st in bf16 8bit; do
  if "$ZINF_PY" - "$W/l200-fp32" "$W/l200-$st" $st <<'PY'
import sys
def tail(p):
    l = [float(x.split()[3]) for x in open(p) if x.startswith("step ")]
    return len(l), sum(l[-20:]) / 20
(na, a), (nb, b) = tail(sys.argv[1]), tail(sys.argv[2])
rel = abs(b - a) / a
print("    200 steps: mean loss of steps 181..200 %.5f with %s moments, %.5f with fp32 (%.2f%%)" % (b, sys.argv[3], a, 100 * rel))
sys.exit(0 if na == nb == 200 and rel <= 0.02 else 1)
PY
  then ok "$st moments train as fp32 ones do (within 2% after 200 steps)"; else bad "$st moments: the loss strays"; fi
done

# checkpoint at step 3, resume to 6: bit for bit (2 ranks)
for x in p2 b2; do
  rm -rf "$W/ck-$x"
  run 2 "$W/$x.plan" --steps 6 --checkpoint-every 3 --checkpoint-dir "$W/ck-$x" --losses "$W/straight-$x" --quiet || bad "$x: the straight run"
  rm -rf "$W/ck-$x/step-00000006"; cp -r "$W/ck-$x" "$W/ck-$x-keep"
  run 2 "$W/$x.plan" --steps 6 --checkpoint-dir "$W/ck-$x" --resume --losses "$W/resumed-$x" --quiet || bad "$x: the resume"
  if [ "$(tail -n 3 "$W/straight-$x")" = "$(cat "$W/resumed-$x")" ]; then
    ok "$x ($(grep -o 'state = "[a-z0-9]*"' "$W/$x.zl")): steps 4..6 resumed from step 3 equal the straight run's bit for bit"
  else bad "$x: the resumed steps differ"; fi
done
tail -n 3 "$W/straight-p2" > "$W/want"

# resharded: the 2-rank 8-bit checkpoint on 1 and 4 ranks, and on a plan with tiles
resume() {
  rm -rf "$W/ck-$1"; cp -r "$W/ck-p2-keep" "$W/ck-$1"
  if ! run "$2" "$W/$3.plan" --steps 6 --checkpoint-dir "$W/ck-$1" --resume --losses "$W/got-$1"; then bad "resume $1: zinfrun failed"; sed 's/^/    | /' "$W/out"; return; fi
  grep -q "resume: from step 3 (.*/step-00000003), resharded" "$W/out" || { bad "resume $1: not resharded"; return; }
  if "$ZINF_PY" - "$W/want" "$W/got-$1" <<'PY'
import sys
want = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
ok = [w[1] for w in want] == [g[1] for g in got] and all(abs(float(a[3]) - float(b[3])) <= 1e-5 * abs(float(a[3])) for a, b in zip(want, got))
print("    steps 4..6 (2 ranks straight / resumed): " + " ".join("%s/%s" % (a[3], b[3]) for a, b in zip(want, got)))
sys.exit(0 if ok else 1)
PY
  then ok "8-bit moments resharded onto $1: steps 4..6 equal the 2-rank run's (relative 1e-5)"; else bad "resume $1: losses differ"; fi
}
resume 1rank 1 p1
resume 4ranks 4 p4
resume tiles 2 q2

# 8-bit moments do not resume into f32 ones
rm -rf "$W/ck-f2"; cp -r "$W/ck-p2-keep" "$W/ck-f2"
run 2 "$W/f2.plan" --steps 6 --checkpoint-dir "$W/ck-f2" --resume
rc=$?
if [ $rc -eq 1 ] && grep -q "tensor 'm.wte' is momentum \[256, 64\] dyn8 in the checkpoint, momentum \[256, 64\] f32 in this plan" "$W/out"; then
  ok "a checkpoint of 8-bit moments is refused by a plan of f32 ones, naming the moment"
else bad "8-bit into f32 moments: exit $rc"; sed 's/^/    | /' "$W/out"; fi

# the CUDA backend on the fake driver (the GPU Adam's kernels on the emulator) against the host backend, 6 steps
if . tests/fakecuda/env.sh; then
  for st in bf16 8bit; do
    name=gpu-$st
    sed -e "s/weight_decay = 0.1)/weight_decay = 0.1, state = \"$st\")/" tests/e2e/models/gpt-micro.zl > "$W/m-$st.zl"
    cat > "$W/$name.zl" <<ZL
import "$W/m-$st"
target fake { nodes = 1; gpus_per_node = 1
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  nvme { paths = ["$W"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "gpu"; optimizer = "gpu"; grads = "gpu"; whole_below = 1000 }
ZL
    mkdir -p "$W/src-$name"
    if ! "$B/bin/zinfc" "$W/$name.zl" -I tests/e2e/models --kernels=sm_90 --kernel-src="$W/src-$name" -o "$W/$name.plan" > "$W/out" 2>&1 ||
       ! "$FAKE/fakecuda_prep" "$W/$name.plan" "$W/src-$name" sm_90 "$UNITS" >> "$W/out" 2>&1; then
      bad "$name: zinfc or fakecuda_prep"; sed 's/^/    | /' "$W/out"; continue
    fi
    grep -q "zk_adam_$([ $st = bf16 ] && echo bf16s || echo q8)" "$W/src-$name"/* || bad "$name: the plan does not launch the $st Adam kernel"
    run 1 "$W/$name.plan" --backend host --steps 6 --losses "$W/$name.host" --quiet || bad "$name: host backend"
    if ! LD_LIBRARY_PATH="$(cd "$FAKE" && pwd):${LD_LIBRARY_PATH:-}" FAKECUDA_UNITS="$UNITS" timeout 300 "$B/bin/zinfrun" "$W/$name.plan" \
         --data "$W/train.bin" --backend cuda --steps 6 --losses "$W/$name.cuda" --quiet < /dev/null > "$W/out" 2>&1; then
      bad "$name: cuda backend on the fake driver"; sed 's/^/    | /' "$W/out"; continue
    fi
    if "$ZINF_PY" - "$W/$name.host" "$W/$name.cuda" <<'PY'
import sys
ref = [l.split() for l in open(sys.argv[1])]
got = [l.split() for l in open(sys.argv[2])]
ok = len(ref) == len(got) == 6 and all(abs(float(a[i]) - float(b[i])) <= 2e-4 * abs(float(a[i])) for a, b in zip(ref, got) for i in (3, 5))
print("    host/cuda: " + " ".join("%s/%s" % (a[3], b[3]) for a, b in zip(ref, got)))
sys.exit(0 if ok else 1)
PY
    then ok "$st moments on the CUDA backend (fake driver) equal the host backend's (relative 2e-4, as cuda_fake.sh)"
    else bad "$name: cuda losses differ from the host's"; fi
  done
else
  bad "the fake CUDA driver did not build"
fi
[ -z "$(ls "$W/nvme")" ] || bad "swap files left: $(ls "$W/nvme")"
e2e_end
