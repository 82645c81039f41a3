#!/bin/sh
# LoRA on the CUDA backend: the plan's own kernels (the scale primitive's
# fill and axpy among them) on the fake driver and NCCL of tests/fakecuda
# (docs/testing-gpu-fake.md). Two micro models with adapters, the rest
# frozen (freeze = ["*", "!*.lora_*"]):
#   gpt-micro   LoRA on c_attn, both c_proj and c_fc, GPU homes, 1 rank
#   llama-micro LoRA on q, v and down (grouped kv heads), CPU homes, 2 ranks
# train 3 steps on the host and the CUDA backend from the same plan: the
# losses and gradient norms agree (2e-4 relative, cuda_fake.sh's tolerance:
# the GPU reduces in another order), every frozen tensor of the CUDA run's
# export is bit-identical to the host run's and to the initial weights
# (--steps 0), and every adapter B has moved from zero.
#   tests/e2e/lora_cuda.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py "torch and safetensors"
e2e_workdir loracuda
e2e_mpi
. tests/fakecuda/env.sh || exit 1
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/gpl.bin" > /dev/null || exit 1
lora='  checkpoint = "layer"\n  freeze = ["*", "!*.lora_*"]'
sed -e "s/^  checkpoint = \"layer\"\$/$lora/" -e 's/block(x, H)/block(x, H, lora_rank = 4, lora_alpha = 8.0, lora_c_attn = true,\
    lora_attn_c_proj = true, lora_c_fc = true, lora_mlp_c_proj = true)/' tests/e2e/models/gpt-micro.zl > "$W/gpt-lora.zl"
sed -e "s/^  checkpoint = \"layer\"\$/$lora/" -e 's/llama_block(x, H, KV, F)/llama_block(x, H, KV, F, lora_rank = 4,\
    lora_alpha = 8.0, lora_q = true, lora_v = true, lora_down = true)/' tests/e2e/models/llama-micro.zl > "$W/llama-lora.zl"
fail=0
for c in "gpt 1 gpu" "llama 2 cpu"; do
  set -- $c; R=$2; k="$1-$R"
  grep -q 'lora_c_attn = true\|lora_q = true' "$W/$1-lora.zl" && grep -q 'freeze = \["\*", "!\*.lora_\*"\]' "$W/$1-lora.zl" ||
    { cat "$W/$1-lora.zl"; echo "FAIL: $k: the model has no adapters"; fail=1; continue; }
  cat > "$W/$k.zl" <<ZL
import "$W/$1-lora.zl"
target fake { nodes = 1; gpus_per_node = $R
  gpu { memory = 1 GiB; flops = 10 T; hbm = 100 GB/s; pcie = 10 GB/s; arch = "sm_90"; sms = 8 }
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2 }
  net { bandwidth = 10 GB/s; latency_us = 5 } }
plan { params = "$3"; optimizer = "$3"; grads = "$3"; whole_below = 1000 }
ZL
  mkdir -p "$W/src-$k"
  "$B/bin/zinfc" "$W/$k.zl" --kernels=sm_90 --kernel-src="$W/src-$k" -o "$W/$k.plan" > "$W/$k.zinfc" 2>&1 &&
    "$FAKE/fakecuda_prep" "$W/$k.plan" "$W/src-$k" sm_90 "$UNITS" > "$W/$k.prep" 2>&1 ||
    { cat "$W/$k.zinfc" "$W/$k.prep"; echo "FAIL: $k: zinfc or fakecuda_prep"; fail=1; continue; }
  host() { timeout 120 mpirun -np "$R" --oversubscribe "$B/bin/zinfrun" "$W/$k.plan" --data "$W/gpl.bin" --backend host \
             --quiet "$@" < /dev/null > "$W/$k.hout" 2>&1; }
  host --steps 0 --export "$W/$k-init.safetensors" && host --steps 3 --losses "$W/$k.host" --export "$W/$k-host.safetensors" &&
    env LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKECUDA_UNITS="$UNITS" FAKECUDA_DEVICES=2 \
      timeout 300 mpirun -np "$R" --oversubscribe -x LD_LIBRARY_PATH -x FAKECUDA_UNITS -x FAKECUDA_DEVICES "$B/bin/zinfrun" \
      "$W/$k.plan" --data "$W/gpl.bin" --backend cuda --steps 3 --losses "$W/$k.cuda" --export "$W/$k-cuda.safetensors" \
      --quiet < /dev/null > "$W/$k.cout" 2>&1 || { tail -5 "$W/$k.hout" "$W/$k.cout"; echo "FAIL: $k: zinfrun"; fail=1; continue; }
  "$ZINF_PY" - "$W/$k" <<'PY' || fail=1
import sys, torch
from safetensors.torch import load_file
k = sys.argv[1]
ref = [l.split() for l in open(k + ".host")]
got = [l.split() for l in open(k + ".cuda")]
worst = max(abs(float(a[i]) - float(b[i])) / abs(float(a[i])) for a, b in zip(ref, got) for i in (3, 5))
ok = len(ref) == len(got) == 3 and worst <= 2e-4
z, h, c = (load_file(k + s) for s in ("-init.safetensors", "-host.safetensors", "-cuda.safetensors"))
frozen = [n for n in h if ".lora_" not in n]
same = all(torch.equal(z[n], c[n]) and torch.equal(h[n], c[n]) for n in frozen)
bs = [n for n in c if ".lora_" in n and n.endswith("_b")]
moved = bs and all(c[n].abs().max() > 0 for n in bs)
name = k.rsplit("/", 1)[1]
if ok and same and frozen and moved:
    print("ok   %s LoRA on the CUDA backend (fake driver): losses and norms = the host backend's (%.1e relative), "
          "%d frozen tensors bit-identical to the initial ones, %d adapter Bs trained" % (name, worst, len(frozen), len(bs)))
else:
    print("FAIL %s LoRA on the CUDA backend: losses match %s (%.1e), frozen tensors (%d) unchanged %s, adapters moved %s"
          % (name, ok, worst, len(frozen), same, moved))
    sys.exit(1)
PY
done
exit $fail
