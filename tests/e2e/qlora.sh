#!/bin/sh
# QLoRA: LoRA adapters on frozen weights stored quantized (train { quantize },
# docs/training.md), on the host backend, held to transformers and peft
# (tests/e2e/qlora.py). A small random LLaMA is compiled with zinfc --from-hf
# --lora r=4,alpha=8,targets=q_proj,v_proj,down_proj --quantize nf4 (and
# int8): every linear of its blocks stored quantized, the embedding, norms
# and head in f32. zinfrun --init quantizes the checkpoint as it reads it
# and trains; checked:
#  1. the plan stores the blocks' linears as nf4 and moves their bytes
#     (zinfdump: 36 bytes per 64 weights), the rest f32;
#  2. the quantized weights zinfrun --export writes (dequantized) equal a
#     numpy reference's quantize-dequantize bit for bit;
#  3. the step-1 loss equals transformers' on the model with those
#     dequantized weights (1e-5 relative), and the loss falls;
#  4. 6 steps, a checkpoint, --resume to 8: the same losses and the same
#     weights, bit for bit, as 8 steps in one run;
#  5. the adapter (--export-hf, PEFT's layout) on the dequantized model and
#     the merged model (--merge-lora) of the weights after 6 steps give
#     zinf's loss of step 7;
#  6. on 2 ranks (every weight over 1000 elements split, the quantized
#     ones in whole blocks): the same exported weights, and the step-1 loss
#     of the global batch equals transformers';
#  7. errors: quantizing a trained weight names it; zinfgen says how to
#     generate from a QLoRA run; an h200 plan has CUDA code for the
#     quantized weights (dequant launches), and one with --kernels=none
#     its figures;
#  8. 50 steps (nf4 and int8) on tokens the adapters can learn (a cycle of
#     8 of the 101): the mean loss of steps 46-50 below 0.8 of step 1's
#     (measured: 0.621 of it, 4.794 -> 2.979 with nf4; int8 0.628);
#  9. the frozen weights homed on NVMe (plan { params = "nvme" }): each
#     NVMe read of a quantized weight moves its quantized bytes (36 per 64
#     weights), zinfdump counts 31.64 KiB of them on nvme, zinfrun stages
#     them from the drive, and the 8 steps' losses equal those of the plan
#     that homes them in CPU memory bit for bit (the same kernels on the
#     same bytes: tolerance 0).
#   tests/e2e/qlora.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py "transformers and peft"
e2e_workdir qlora
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
cat > "$W/t.zl" <<ZL
target t { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G } }
ZL
"$ZINF_PY" tests/e2e/lora.py make "$W" llama > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the model"; exit 1; }
M=$W/llama
run() { # PLAN OUT ARGS...: zinfrun on the host backend
  p=$1 o=$2
  shift 2
  timeout 120 "$B/bin/zinfrun" "$p" --data "$M/tok.bin" --backend host --quiet "$@" < /dev/null > "$o" 2>&1 || { cat "$o"; return 1; }
}
for q in nf4 int8; do
  "$B/bin/zinfc" --from-hf "$M/hf" --lora r=4,alpha=8,targets=q_proj,v_proj,down_proj --quantize $q --emit=zl > "$M/$q.gen.zl" 2> "$W/gen.err" ||
    { cat "$W/gen.err"; bad "$q: zinfc --from-hf --lora --quantize"; continue; }
  grep -q "^  quantize = \"$q\"" "$M/$q.gen.zl" || bad "$q: no quantize line in the generated model"
  sed -e 's/lr = 2e-5/lr = 0.01/' -e 's/warmup = 20$/warmup = 0/' "$M/$q.gen.zl" > "$M/$q.zl"
  "$B/bin/zinfc" "$M/$q.zl" --target "$W/t.zl" -o "$M/$q.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; bad "$q: zinfc"; continue; }
done
# 1. what is stored quantized, and its bytes
"$B/bin/zinfc" "$M/nf4.zl" --emit=graph > "$W/graph.out" 2>&1
nq=$(grep -c '^param llama_block\.[01]\.[a-z_]*\.w[qkvo123] nf4 ' "$W/graph.out")
nf=$(grep '^param ' "$W/graph.out" | grep -vc '^param llama_block\.[01]\.[a-z_]*\.w[qkvo123] ')
nff=$(grep '^param ' "$W/graph.out" | grep -v '^param llama_block\.[01]\.[a-z_]*\.w[qkvo123] ' | grep -c '^param [^ ]* f32 ')
if [ "$nq" = 14 ] && [ "$nf" = "$nff" ]; then
  ok "nf4: the 14 block linears stored nf4, embedding, norms, head and adapters f32"
else bad "nf4: $nq block linears nf4, $nff of the $nf others f32 in --emit=graph"; grep '^param' "$W/graph.out"; fi
# wq [64, 64]: 4096 weights in 64 blocks of 36 bytes
if "$B/bin/zinfdump" "$M/nf4.plan" --memory 2>&1 | grep -q " 2304  persistent  *llama_block.0.rope_attn.wq$"; then
  ok "nf4: wq's home holds 2304 bytes (64 blocks of 36)"
else bad "nf4: zinfdump does not show wq's 2304 bytes"; "$B/bin/zinfdump" "$M/nf4.plan" --memory 2>&1 | grep "rope_attn.wq" | head -3; fi
# the summary and the planner's explanation count the blocks: 57600 weights, 0.5625 bytes each against f32's 4
if "$B/bin/zinfdump" "$M/nf4.plan" | grep -q "^quantized: 14 frozen weights, 57600 parameters stored nf4: 31.64 KiB per rank (0.141 of 225.00 KiB in f32); gpu 31.64 KiB" &&
   "$B/bin/zinfc" "$M/nf4.zl" --target "$W/t.zl" -o "$W/x.plan" --explain 2>&1 | grep -q "^quantized: 14 frozen weights stored nf4, 31.64 KiB per rank, 0.141 of their 225.00 KiB in f32"; then
  ok "nf4: zinfdump and --explain count 31.64 KiB for 57600 weights (0.141 of f32)"
else bad "nf4: zinfdump or --explain lack the quantized bytes"; "$B/bin/zinfdump" "$M/nf4.plan" | head -6; fi
# 2-5
for q in nf4 int8; do
  [ -f "$M/$q.plan" ] || continue
  if [ $q = nf4 ]; then
    # the adapter and the merged model of the weights after 6 steps: zinf's loss of step 7
    run "$M/$q.plan" "$W/a.out" --init "$M/hf" --steps 6 --checkpoint-dir "$W/ck" --losses "$W/l6" &&
      run "$M/$q.plan" "$W/f.out" --resume --steps 0 --checkpoint-dir "$W/ck" --export-hf "$M/$q.adapter" &&
      run "$M/$q.plan" "$W/g.out" --resume --steps 0 --checkpoint-dir "$W/ck" --merge-lora --export-hf "$M/$q.merged" &&
      run "$M/$q.plan" "$W/b.out" --resume --steps 8 --checkpoint-dir "$W/ck" --losses "$W/l78" &&
      run "$M/$q.plan" "$W/c.out" --init "$M/hf" --steps 8 --checkpoint-dir "$W/ck8" --losses "$M/$q.losses" &&
      run "$M/$q.plan" "$W/d.out" --resume --steps 0 --checkpoint-dir "$W/ck" --export "$W/resumed.safetensors" &&
      run "$M/$q.plan" "$W/e.out" --resume --steps 0 --checkpoint-dir "$W/ck8" --export "$M/$q.all.safetensors" || { bad "$q: zinfrun"; continue; }
    if cat "$W/l6" "$W/l78" | cmp -s - "$M/$q.losses" && cmp -s "$W/resumed.safetensors" "$M/$q.all.safetensors"; then
      ok "$q: 6 steps + --resume to 8 = 8 steps in one run (losses and weights bit for bit)"
    else bad "$q: resumed run differs"; cat "$W/l6" "$W/l78" "$M/$q.losses"; fi
    if awk '$2 == 1 {a = $4} $2 == 8 {b = $4} END {exit !(b < a)}' "$M/$q.losses"; then
      ok "$q: the loss falls ($(awk '$2 == 1 {print $4}' "$M/$q.losses") -> $(awk '$2 == 8 {print $4}' "$M/$q.losses"))"
    else bad "$q: the loss does not fall"; cat "$M/$q.losses"; fi
    "$ZINF_PY" tests/e2e/qlora.py check "$M" $q 7 || e2e_failed=1
  else
    run "$M/$q.plan" "$W/a.out" --init "$M/hf" --steps 1 --checkpoint-dir "$W/ck-$q" --losses "$M/$q.losses" --export "$M/$q.all.safetensors" ||
      { bad "$q: zinfrun"; continue; }
    "$ZINF_PY" tests/e2e/qlora.py check "$M" $q 1 || e2e_failed=1
  fi
done
# 6. two ranks
if command -v mpirun > /dev/null 2>&1; then
  e2e_mpi
  sed 's/ranks = 1/ranks = 2/' "$W/t.zl" > "$W/t2.zl"
  (cat "$M/nf4.zl"; echo 'plan { whole_below = 1000 }') > "$W/r2.zl"
  mkdir -p "$W/r2"
  cp -r "$M/hf" "$M/tok.bin" "$W/r2/"
  if "$B/bin/zinfc" "$W/r2.zl" --target "$W/t2.zl" -o "$W/r2.plan" > "$W/zinfc.out" 2>&1 &&
     timeout 120 mpirun -np 2 "$B/bin/zinfrun" "$W/r2.plan" --data "$M/tok.bin" --backend host --quiet --init "$M/hf" --steps 1 \
       --checkpoint-dir "$W/ck-r2" --losses "$W/r2/nf4.losses" --export "$W/r2/nf4.all.safetensors" < /dev/null > "$W/r2.out" 2>&1; then
    "$ZINF_PY" tests/e2e/qlora.py check "$W/r2" nf4 1 2 || e2e_failed=1
  else cat "$W/zinfc.out" "$W/r2.out"; bad "nf4 on 2 ranks: zinfc or zinfrun"; fi
else e2e_skip_part "no mpirun: the 2-rank run"; fi
# 7. errors
if timeout 60 "$B/bin/zinfgen" "$M/nf4.plan" --prompt-ids 1,2,3 --checkpoint "$W/ck8" --max-new 2 > "$W/err.out" 2>&1; then
  bad "zinfgen took a QLoRA plan"
elif grep -q "is stored quantized (nf4).*zinfrun --merge-lora --export-hf" "$W/err.out"; then ok "zinfgen says how to generate from a QLoRA run"
else bad "zinfgen: unexpected message"; cat "$W/err.out"; fi
sed -e 's/  quantize = "nf4"/  quantize = "nf4"\n  quantize_params = ["*.rope_attn.wq", "*.lora_*"]/' "$M/nf4.zl" > "$W/trained.zl"
if "$B/bin/zinfc" "$W/trained.zl" > "$W/err.out" 2>&1; then bad "quantizing adapters was accepted"
elif grep -q "cannot store 'llama_block.0.rope_attn.lora_q_a' quantized: it is trained" "$W/err.out"; then ok "quantizing a trained weight is an error naming it"
else bad "quantizing a trained weight: unexpected message"; cat "$W/err.out"; fi
if "$B/bin/zinfc" "$M/nf4.zl" --target h200 --kernels=sm_90 -o "$W/gpu.plan" > "$W/err.out" 2>&1 &&
   [ "$("$B/bin/zinfdump" "$W/gpu.plan" --kernels | grep -c "zk_dequant_nf4 <<<")" -gt 0 ]; then
  ok "CUDA code for quantized weights: dequant launches before their GEMMs (tests/e2e/qlora_cuda.sh runs them)"
else bad "GPU target with nf4 weights"; cat "$W/err.out"; fi
# --kernels=none plans them for a GPU target (the figures of docs/tuning.md)
if "$B/bin/zinfc" "$M/nf4.zl" --target h200 --kernels=none -o "$W/gpu.plan" > "$W/err.out" 2>&1 &&
   "$B/bin/zinfdump" "$W/gpu.plan" | grep -q "^quantized: 14 frozen weights, 57600 parameters stored nf4: 31.64 KiB per rank"; then
  ok "an h200 plan with --kernels=none holds the nf4 weights"
else bad "h200 --kernels=none"; cat "$W/err.out"; fi
# 8. the loss falls over 50 steps on data the adapters can learn: a cycle
# of 8 tokens (random data has nothing to learn below ln(101), and 8 steps
# show noise as much as training)
"$ZINF_PY" -c '
import sys, numpy as np
cyc = np.random.default_rng(3).choice(101, 8, replace=False)
ids = np.resize(cyc, 4000).astype(np.uint16)
h = np.zeros(256, np.int32)
h[:4] = [20240520, 1, ids.size, 101]
open(sys.argv[1], "wb").write(h.tobytes() + ids.tobytes())' "$W/cycle.bin" || bad "writing the cycle's tokens"
for q in nf4 int8; do
  [ -f "$M/$q.plan" ] || continue
  if timeout 120 "$B/bin/zinfrun" "$M/$q.plan" --data "$W/cycle.bin" --backend host --quiet --init "$M/hf" --steps 50 \
       --checkpoint-dir "$W/ck50-$q" --losses "$W/l50-$q" < /dev/null > "$W/l50.out" 2>&1; then
    if awk '$2 == 1 {a = $4} $2 > 45 {s += $4; n++} END {exit !(n == 5 && s / n < 0.8 * a)}' "$W/l50-$q"; then
      ok "$q: 50 steps: the loss falls ($(awk '$2 == 1 {a = $4} $2 > 45 {s += $4} END {printf "%.4f -> %.4f, mean of the last 5; %.3f of step 1", a, s / 5, s / 5 / a}' "$W/l50-$q"))"
    else bad "$q: 50 steps: the mean loss of the last 5 is not below 0.8 of step 1's"; cat "$W/l50-$q"; fi
  else cat "$W/l50.out"; bad "$q: zinfrun, 50 steps"; fi
done
# 9. the quantized weights homed on NVMe: the drive stages their quantized bytes
mkdir -p "$W/nvme"
cat > "$W/tn.zl" <<ZL
target tn { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1.5 GB/s; write = 1.5 GB/s; capacity = 4 GiB } }
ZL
for h in cpu nvme; do
  { cat "$M/nf4.zl"; echo "plan { params = \"$h\" }"; } > "$W/home-$h.zl"
  "$B/bin/zinfc" "$W/home-$h.zl" --target "$W/tn.zl" -o "$W/home-$h.plan" > "$W/zinfc.out" 2>&1 || { cat "$W/zinfc.out"; bad "zinfc params = $h"; }
done
if [ -f "$W/home-nvme.plan" ] && [ -f "$W/home-cpu.plan" ]; then
  # every NVMe read of a block linear: its nf4 bytes (wq, wo [64, 64]: 2304;
  # wk, wv [64, 32]: 1152; w1, w3 [64, 86], w2 [86, 64]: 86 blocks, 3096)
  "$B/bin/zinfdump" "$W/home-nvme.plan" --schedule > "$W/nvme.sched" 2>&1
  if awk '$3 == "nvme_read" && $4 ~ /^llama_block\.[01]\.[a-z_]*\.w[qkvo123]$/ {
            n++; split($6, a, "+"); b = a[2] + 0; w = substr($4, length($4) - 1)
            want = (w == "wq" || w == "wo") ? 2304 : (w == "wk" || w == "wv") ? 1152 : 3096
            if (b != want) { print "  " $4 " reads " b " bytes, not " want; bad = 1 }
            if (!($4 in seen)) { seen[$4] = 1; tot += b } }
          END { print "  " n " reads, " tot " bytes over the distinct weights"; exit bad || n < 14 || tot != 32400 }' \
        "$W/nvme.sched" > "$W/nvme.check" &&
     "$B/bin/zinfdump" "$W/home-nvme.plan" | grep -q "^quantized: 14 frozen weights, 57600 parameters stored nf4: 31.64 KiB per rank (0.141 of 225.00 KiB in f32); nvme 31.64 KiB"; then
    ok "nvme: each NVMe read of a quantized weight moves its nf4 bytes ($(tail -1 "$W/nvme.check" | sed 's/^  //'): 36 per 64 weights), zinfdump counts 31.64 KiB on nvme"
  else bad "nvme: the NVMe reads or zinfdump's count of the quantized weights"; cat "$W/nvme.check"; "$B/bin/zinfdump" "$W/home-nvme.plan" | head -6; fi
  if timeout 120 "$B/bin/zinfrun" "$W/home-cpu.plan" --data "$W/cycle.bin" --backend host --quiet --init "$M/hf" --steps 8 \
       --checkpoint-dir "$W/ck-hcpu" --losses "$W/l-hcpu" < /dev/null > "$W/hcpu.out" 2>&1 &&
     timeout 120 "$B/bin/zinfrun" "$W/home-nvme.plan" --data "$W/cycle.bin" --backend host --init "$M/hf" --steps 8 \
       --nvme "$W/nvme" --checkpoint-dir "$W/ck-hnvme" --losses "$W/l-hnvme" < /dev/null > "$W/hnvme.out" 2>&1; then
    if grep -q "^  nvme staging: " "$W/hnvme.out" && grep -q "^step    8/8 .* nvme [1-9]" "$W/hnvme.out" && cmp -s "$W/l-hcpu" "$W/l-hnvme" &&
       [ "$(wc -l < "$W/l-hnvme")" = 8 ]; then
      ok "nvme: 8 steps with the nf4 weights staged from NVMe: the losses of the CPU-homed plan, bit for bit ($(awk '$2 == 8 {print $4}' "$W/l-hnvme") at step 8)"
    else bad "nvme: the NVMe-homed run differs from the CPU-homed one, or staged nothing"; paste "$W/l-hcpu" "$W/l-hnvme"; grep "nvme" "$W/hnvme.out"; fi
  else cat "$W/hcpu.out" "$W/hnvme.out"; bad "nvme: zinfrun"; fi
fi
e2e_end
