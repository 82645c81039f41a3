#!/bin/sh
# Hugging Face weights in and out, against transformers itself.
#
# Small random models made with transformers and saved with save_pretrained
# (GPT-2 with tied embeddings and an odd vocabulary; LLaMA with grouped-query
# attention, an untied head and odd sizes; LLaMA with attention_bias,
# mlp_bias and its own head_dim; OLMo 2 with attention_bias and tied
# embeddings; Phi-3, whose fused qkv_proj and gate_up_proj the export joins
# again; nothing downloaded) are compiled
# with zinfc --from-hf, then for 1 rank (the planner's placement, and
# parameters on CPU) and 2 ranks with parameters and Adam state on NVMe:
# zinfrun --init DIR trains 3 steps (its step-1 loss must be
# transformers' loss on the same batch, f32, 1e-5 relative), checkpoints and
# --export-hf's; --resume runs step 4, whose loss must be transformers' on the
# export loaded with from_pretrained (no missing or unexpected keys). Then
# what --init refuses (missing tensors, a wrong shape, an integer dtype, a
# truncated file, a plan without a mapping) and skips (a tied lm_head and
# mask buffers), --export-hf into a non-empty directory refused before
# training, and the peak RSS of importing a larger checkpoint to NVMe.
#   tests/e2e/hf_weights.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py transformers
ROOT=$(pwd)
e2e_workdir hfw
e2e_mpi
export TRANSFORMERS_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
fail=0
# the larger model of the memory check at the end too (--big): one Python start the less
"$ZINF_PY" tests/e2e/hf_weights.py make "$W" --big > "$W/make.log" 2>&1 || { cat "$W/make.log"; echo "FAIL: making the models"; exit 1; }

target() { # target R: a host target of R ranks
  cat > "$W/t$1.zl" <<ZL
target t$1 { backend = "host"; ranks = $1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
ZL
}
target 1; target 2
mkdir -p "$W/nvme"
zrun() { # zrun R args...: zinfrun on R ranks
  r=$1; shift
  if [ "$r" = 1 ]; then timeout 120 "$B/bin/zinfrun" "$@" < /dev/null
  else timeout 120 mpirun -np "$r" --oversubscribe "$B/bin/zinfrun" "$@" < /dev/null; fi
}

: > "$W/cases"
# Each model: planned straight from its directory (1 rank, the planner's
# placement, micro_batch 1 as zinfc --from-hf writes it), and from the .zl
# that --emit=zl prints, edited (micro_batch 2, a learning rate that moves
# the weights, a plan block) for 1 rank on CPU and 2 ranks on NVMe.
for m in gpt2 llama llama-bias olmo2 phi3; do
  "$B/bin/zinfc" --from-hf "$W/$m/hf" --emit=zl > "$W/$m/gen.zl" 2> "$W/$m/gen.err" || { cat "$W/$m/gen.err"; echo "FAIL: zinfc --from-hf $m"; fail=1; continue; }
  for place in cpu nvme; do
    case $place in
      cpu) pin='plan { params = "cpu"; optimizer = "cpu"; grads = "cpu" }' ;;
      nvme) pin='plan { params = "nvme"; optimizer = "nvme"; grads = "cpu" }' ;;
    esac
    { sed -e 's/micro_batch = 1$/micro_batch = 2/' -e 's/lr = 2e-5/lr = 1e-3/' -e 's/warmup = 20$/warmup = 0/' "$W/$m/gen.zl"; echo "$pin"; } > "$W/$m/$place.zl"
  done
  for c in "direct 1 1" "cpu 1 2" "nvme 2 2"; do
    set -- $c; place=$1; R=$2; mb=$3; k="$m-$place"
    if [ $place = direct ]; then "$B/bin/zinfc" --from-hf "$W/$m/hf" --target "$W/t$R.zl" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1
    else "$B/bin/zinfc" "$W/$m/$place.zl" --target "$W/t$R.zl" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1; fi || { cat "$W/$k.zinfc"; echo "FAIL: zinfc $k"; fail=1; continue; }
    zrun "$R" "$W/$k.plan" --init "$W/$m/hf" --data "$W/tok.bin" --steps 3 --nvme "$W/nvme" --checkpoint-dir "$W/ck-$k" \
        --export-hf "$W/out-$k" --losses "$W/$k.a" > "$W/$k.out" 2>&1 || { cat "$W/$k.out"; echo "FAIL: training $k from its checkpoint"; fail=1; continue; }
    grep -q "^init: " "$W/$k.out" || { cat "$W/$k.out"; echo "FAIL: $k: no init line"; fail=1; }
    zrun "$R" "$W/$k.plan" --data "$W/tok.bin" --steps 4 --nvme "$W/nvme" --checkpoint-dir "$W/ck-$k" --resume \
        --losses "$W/$k.b" > "$W/$k.out" 2>&1 || { cat "$W/$k.out"; echo "FAIL: resuming $k"; fail=1; continue; }
    echo "$k $mb $R $W/$m/hf $W/out-$k $W/$k.a $W/$k.b" >> "$W/cases"
  done
done
"$ZINF_PY" tests/e2e/hf_weights.py check "$W" "$W/cases" 2> "$W/check.log" || { cat "$W/check.log"; fail=1; }

# --- what --init refuses, before a step runs (exit 1, the file and tensors named) ---
refused() { # refused WHAT PATTERN args...
  what=$1; pat=$2; shift 2
  zrun 1 "$W/llama-cpu.plan" --data "$W/tok.bin" --steps 1 --nvme "$W/nvme" "$@" > "$W/r.out" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "$pat" "$W/r.out" && ! grep -q "^step" "$W/r.out"; then echo "ok   refused: $what"
  else echo "FAIL refused: $what (exit $rc)"; cat "$W/r.out"; fail=1; fi
}
refused "missing tensors" "bad-missing: 2 tensors the plan maps are not in the checkpoint: model.layers.1.mlp.down_proj.weight, model.norm.weight" --init "$W/bad-missing"
refused "a wrong shape" "tensor 'lm_head.weight' has shape \[101, 65\], the plan needs \[101, 64\] (for 'head', transposed)" --init "$W/bad-shape"
refused "an integer dtype" "tensor 'model.norm.weight' is I32; zinf imports F32, F16 and BF16" --init "$W/bad-dtype"
cp "$W/llama/hf/model.safetensors" "$W/trunc.safetensors" && truncate -s -100 "$W/trunc.safetensors"
refused "a truncated file" "trunc.safetensors: tensor '.*': data_offsets .* run past the end of the file" --init "$W/trunc.safetensors"
echo "not a safetensors file" > "$W/text.safetensors"
refused "an absurd header length" "text.safetensors: header length [0-9]* is absurd (the format allows at most 100000000 bytes)" --init "$W/text.safetensors"
printf '\350\003\000\000\000\000\000\000{}' > "$W/short.safetensors"
refused "a header length past the file" "short.safetensors: header length 1000 runs past the end of the file (10 bytes)" --init "$W/short.safetensors"
mkdir -p "$W/full" && echo x > "$W/full/keep"
refused "--export-hf into a non-empty directory" "full already exists and is not empty" --export-hf "$W/full"
"$B/bin/zinfc" tests/e2e/models/gpt-micro.zl --target "$W/t1.zl" -o "$W/micro.plan" > /dev/null 2>&1
zrun 1 "$W/micro.plan" --init "$W/gpt2/hf" --steps 0 > "$W/r.out" 2>&1
if [ $? -eq 1 ] && grep -q "zinfrun: --init: .*: the plan has no Hugging Face mapping (its model has no hf block), and this is not a zinfrun --export file of its model" "$W/r.out"; then echo "ok   refused: a plan without an hf mapping"
else echo "FAIL: a plan without an hf mapping"; cat "$W/r.out"; fail=1; fi
# a GPT-2 checkpoint carrying the tied lm_head.weight and a mask buffer: skipped, said so
zrun 1 "$W/gpt2-cpu.plan" --init "$W/gpt2-extra" --steps 0 --export-hf "$W/rt-gpt2" > "$W/r.out" 2>&1
if [ $? -eq 0 ] && grep -q "^init: skipped 2 tensors with no zinf counterpart .*: lm_head.weight, transformer.h.0.attn.bias" "$W/r.out" &&
   cmp -s "$W/rt-gpt2/config.json" "$W/gpt2/hf/config.json"; then echo "ok   skipped: a tied lm_head.weight and a mask buffer; --steps 0 exports at once"
else echo "FAIL: gpt2 with lm_head.weight"; cat "$W/r.out"; fail=1; fi

# --- memory: a 142 MB checkpoint into parameters on NVMe: the import adds its staging, not the model ---
if [ -f "$W/big/hf/model.safetensors" ] &&   # hf_weights.py make --big made it (or says why in big.log)
   "$B/bin/zinfc" --from-hf "$W/big/hf" --emit=zl > "$W/big.zl" 2>> "$W/big.log" &&
   echo 'plan { params = "nvme"; optimizer = "nvme"; grads = "nvme" }' >> "$W/big.zl" &&
   "$B/bin/zinfc" "$W/big.zl" --target "$W/t1.zl" -o "$W/big.plan" > "$W/big.log" 2>&1 &&
   zrun 1 "$W/big.plan" --init "$W/big/hf" --steps 0 --nvme "$W/nvme" > "$W/big.out" 2>&1; then
  [ -n "${HF_WEIGHTS_VERBOSE:-}" ] && cat "$W/big.out"
  line=$(grep "^init: " "$W/big.out")
  size=$(stat -c %s "$W/big/hf/model.safetensors")
  echo "$line" | awk -v size="$size" '{ for (i = 1; i <= NF; i++) { if ($i == "RSS") peak = $(i + 1); if ($i == "MiB" && $(i + 1) ~ /^\(/) before = substr($(i + 1), 2) }
      grow = peak - before; ok = grow < 80
      printf "%s import of %.0f MiB to NVMe: peak RSS %.1f MiB, %.1f MiB before the import (+%.1f, staging 64 MiB)\n", ok ? "ok  " : "FAIL", size / 1048576, peak, before, grow
      exit !ok }' || fail=1
else
  cat "$W/big.log" "$W/big.out" 2> /dev/null | tail -20; echo "FAIL: the larger import"; fail=1
fi
exit $fail
