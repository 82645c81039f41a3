#!/bin/sh
# zinfc embeds the CUDA kernels of a GPU plan: every unit compiled by NVRTC
# for sm_80 and sm_90 (no GPU needed), listed by zinfdump --kernels with
# the ptxas report and every op's launches (and a tiled plan's tile
# launches); --kernel-src writes each unit's
# source under the name the launches use; two compilations give
# byte-identical plans (the second from the cache); a model the kernels
# cannot serve is a clear error with the way out.
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir kernels
export ZINF_CACHE_DIR="$W/cache"
fail=0
mkdir "$W/src"
"$B/bin/zinfc" examples/gpt2-tiny.zl --target h200 -o "$W/a.plan" --kernel-src="$W/src" > "$W/out" 2>&1 || { echo "FAIL: zinfc"; cat "$W/out"; exit 1; }
grep "^kernels:" "$W/out"
"$B/bin/zinfc" examples/gpt2-tiny.zl --target h200 -o "$W/b.plan" > "$W/out2" 2>&1 || { echo "FAIL: zinfc again"; exit 1; }
grep -q "^kernels: .*: 0 compiled in " "$W/out2" || { echo "FAIL: the second compilation did not come from the cache"; cat "$W/out2"; fail=1; }
cmp -s "$W/a.plan" "$W/b.plan" && echo "ok   two runs give byte-identical plans" || { echo "FAIL: plans differ"; fail=1; }
"$B/bin/zinfdump" "$W/a.plan" --kernels > "$W/k" || { echo "FAIL: zinfdump --kernels"; fail=1; }
n80=$(grep -c " sm_80 " "$W/k"); n90=$(grep -c " sm_90 " "$W/k")
if [ "$n80" -ge 8 ] && [ "$n80" -eq "$n90" ] && grep -q "zk_gemm: [1-9][0-9]* registers" "$W/k"; then
  echo "ok   $n80 units for sm_80 and for sm_90, with ptxas resource reports"
else echo "FAIL: kernels listing"; head -5 "$W/k"; fail=1; fi
# launches per op: a linear op runs zk_gemm on its tensors; gpt2-tiny is f32: one utility axpy for f32
if awk '/^  op [0-9]+ fwd linear @block.0.attn: 1 launch$/ { getline; print; exit }' "$W/k" |
   grep -q "^    [0-9]*: zk_gemm <<<([0-9]*,[0-9]*,1), (256,1,1), 0>>> (%[0-9]*, %[0-9]*, block.0.attn.wqkv, block.0.attn.bqkv, 256, " &&
   grep -q "^  op [0-9]* adam: 1 launch" "$W/k" && grep -q "zk_adam <<<.*(wte, NULL, grad.wte, m.wte, v.wte, grad_norm, numel(wte), \$lr," "$W/k" &&
   grep -q "zk_sumsq_partial <<<.*(ws+0, grad.wte, numel(grad.wte))" "$W/k"; then
  echo "ok   launches per op: linear, adam and grad norm (shard element counts)"
else echo "FAIL: launches listing"; grep -A1 "fwd linear @block.0.attn\| adam:" "$W/k" | head -6; fail=1; fi
if grep -A1 "^  utility axpy f32:" "$W/k" | grep -q "zk_axpy <<<.*>>> (_, _, [0-9]*, 1) elementwise-" &&
   ! grep -q "^  utility axpy bf16:" "$W/k"; then echo "ok   one utility axpy, for f32"
else echo "FAIL: utility axpy"; grep -A1 "utility" "$W/k"; fail=1; fi
# tiled weights: each tiled kernel instruction's tile gets its launches, listed after its op's, with
# the tile's columns as byte offsets; the tiles need no units the untiled plan lacks
cat > "$W/tiled.zl" <<ZL
import "$(pwd)/examples/gpt2-tiny"
plan { whole_below = 1000; tiles "*.mlp.w*" = 2; tiles "wte" = 4 }
ZL
if "$B/bin/zinfc" "$W/tiled.zl" --target h200 -o "$W/t.plan" > "$W/tout" 2>&1 && "$B/bin/zinfdump" "$W/t.plan" --kernels > "$W/tk"; then
  ntc=$(sed -n 's/^[0-9]* launches: [0-9]* for [0-9]* ops, [0-9]* for \([0-9]*\) tiles of tiled ops, .*/\1/p' "$W/tk")
  nt=$(grep -c "^    tile [0-9]* of [0-9]*" "$W/tk")
  # gpt2-tiny: 4 layers x 2 MLP linears x 2 tiles x (fwd, recompute, bwd) = 48, and wte's embedding and head matmul x 4 tiles x (fwd, bwd) = 16
  if [ "$ntc" = "$nt" ] && [ "$nt" -eq 64 ] &&
     awk '/^  op [0-9]+ fwd linear @block.0.mlp: 1 launch$/ { for (i = 0; i < 5; i++) { getline; print } exit }' "$W/tk" > "$W/tl" &&
     sed -n 2p "$W/tl" | grep -q "^    tile 0 of 2: 1 launch$" &&
     sed -n 3p "$W/tl" | grep -q "^      [0-9]*: zk_gemm <<<.*>>> (%[0-9]*, %[0-9]*, block.0.mlp.w1, block.0.mlp.b1, 256, 512, 64, 128, 512, 512, .*, 1, 0) gemm-" &&
     grep -A4 "^    tile 1 of 2: 1 launch$" "$W/tl" | grep -q "^      [0-9]*: zk_gemm <<<.*>>> (%[0-9]*, %[0-9]*+256B, block.0.mlp.w1, NULL, 256, 512, 64, .*, 1, 1) gemm-" &&
     grep -q "^      [0-9]*: zk_embed_fwd_tile <<<.*>>> (%[0-9]*, wte, tokens, 256, 192, 64, 256, 128, 0, ws+0) embedding-" "$W/tk" &&
     grep -q "^      [0-9]*: zk_embed_bwd_tile <<<.*>>> (grad.wte, d%[0-9]*, tokens, 256, 64, 64, 128) embedding-" "$W/tk" &&
     grep -q "^      [0-9]*: zk_gemm <<<.*>>> (%[0-9]*+512B, %[0-9]*, wte, NULL, 256, 64, 128, " "$W/tk" &&
     [ "$(grep -c " sm_80 " "$W/tk")" = "$n80" ]; then
    echo "ok   $nt tile launch lists (MLP linears by 2, wte's embedding and head by 4), no extra units"
  else echo "FAIL: tile launches listing ($ntc tile entries, $nt listed)"; cat "$W/tl"; grep -m3 "tile\|_tile" "$W/tk"; fail=1; fi
else echo "FAIL: zinfc or zinfdump on a tiled plan"; cat "$W/tout"; fail=1; fi
# --kernel-src: exactly the units the plan embeds and its launches name, by the same names (but
# the decode unit, which no launch names: zinfgen --decode kv finds its entries by name)
grep " sm_80 " "$W/k" | awk '{print $1}' | sort > "$W/units"
ls "$W/src" | sort > "$W/files"
grep "^    [0-9]*: " "$W/k" | awk '{print $NF}' | sort -u > "$W/used"
grep -v "^decode-" "$W/units" > "$W/launched"
if [ -s "$W/files" ] && cmp -s "$W/units" "$W/files" && cmp -s "$W/launched" "$W/used" && grep -q "^decode-" "$W/units" &&
   grep -q "zk_axpy" "$W/src"/elementwise-*.cu; then
  echo "ok   --kernel-src wrote the $(wc -l < "$W/files") units the launches name"
else echo "FAIL: --kernel-src files differ from the units"; diff "$W/units" "$W/files"; diff "$W/units" "$W/used"; fail=1; fi
"$B/bin/zinfc" examples/gpt2-tiny.zl --target host -o "$W/h.plan" > /dev/null 2>&1 && "$B/bin/zinfdump" "$W/h.plan" --kernels | grep -q "^0 kernels" \
  && echo "ok   a host plan carries no GPU code" || { echo "FAIL: host plan kernels"; fail=1; }
# the paper's 1T model: head dim 100, padded to 128 inside the attention kernels. On a
# DGX-2 the first plan's arena fills the 92% of a GPU the planner uses, and the kernels'
# workspaces beside it (attention's 4.79 GiB on each of 2 queues, the collective
# scratch) would not fit: zinfc plans again with them kept free, says so, and the
# plan's whole GPU allocation (zinfdump's "on the gpu") is within the 32 GiB.
"$B/bin/zinfc" examples/zero-infinity/zi-1t.zl --target dgx2 -o "$W/z.plan" > "$W/zo" 2>&1
rc=$?
again=$(grep "^gpu: the arena [0-9.]* GiB and [0-9.]* GiB beside it exceed the 32.00 GiB of target 'dgx2': planning again with [0-9.]* GiB kept free beside the arena" "$W/zo")
total=$("$B/bin/zinfdump" "$W/z.plan" 2>/dev/null | sed -n 's/^  on the gpu: [0-9.]* [KMG]iB (\([0-9]*\) bytes) of 32.00 GiB = .*/\1/p')
if [ $rc -eq 0 ] && [ -n "$again" ] && [ -n "$total" ] && [ "$total" -le 34359738368 ] &&
   "$B/bin/zinfdump" "$W/z.plan" --kernels | grep -q "hd=100 fwd=mma.sync rows/warp=4/2 padded=128"; then
  echo "ok   zi-1t on dgx2: planned again with the kernels' workspaces kept free ($total bytes on the GPU); padded attention units"
else echo "FAIL: zi-1t on dgx2 gave exit $rc, total '$total'"; grep -m3 "error\|wrote\|^gpu:" "$W/zo"; fail=1; fi
# past the kernels' head dims: an error naming the limit, and the way out
cat > "$W/hd320.zl" <<ZL
import "llama"
const V = 256, T = 40, D = 640, H = 2, KV = 2, F = 352
model m(tokens: i32[B, T], targets: i32[B, T]) {
  tok = param [V, D] init normal(0.02)
  x = rms(llama_block(embedding(tok, tokens), H, KV, F))
  head = param [D, V] init normal(0.02)
  loss cross_entropy(linear(x, head), targets)
}
train { micro_batch = 2; steps = 1; dtype = bf16; optimizer = adam(lr = 1e-3) }
ZL
"$B/bin/zinfc" "$W/hd320.zl" --target h200 -o "$W/h320.plan" > "$W/ho" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "head dim 320: the CUDA kernels support head dims up to 256" "$W/ho" && grep -q "kernels=none" "$W/ho"; then
  echo "ok   head dim 320: error naming the limit, and the hint"
else echo "FAIL: head dim 320 gave exit $rc"; head -5 "$W/ho"; fail=1; fi
exit $fail
