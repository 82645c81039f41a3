#!/bin/sh
# Seed corpora for the fuzz targets (tests/fuzz, docs/testing.md), made from
# the repository and a build's zinfc:
#   tests/fuzz/seeds.sh BUILD OUT [--kernels]
#   OUT/frontend/  every .zl under examples/, stdlib/ and tests/
#   OUT/json/, OUT/safetensors/, OUT/hfconfig/, OUT/hftok/, OUT/chattmpl/: the small
#                  hand-made files of tests/fuzz/seeds/NAME
#   OUT/plan/      host plans (--kernels=none) of tests/fuzz/models/nano.zl
#                  (one on a probed target with every measured figure),
#                  tests/e2e/models/*.zl and examples/*.zl (shrunk to one
#                  layer where the plan would be large), for the built-in host
#                  target (4 ranks) and for 1- and 2-rank host targets with
#                  parameters and optimizer state on NVMe or CPU, whole or
#                  partitioned (NVMe state also overlapped: twins on NVMe),
#                  and a tiled embedding (examples: one rank, one layer); with --kernels first a plan with CUDA launches
#                  (NVRTC needed; its cubins cut to 64 bytes by shrink_kernels).
# Plans over MAX_PLAN bytes are left out, and plans stop once the corpus holds
# MAX_TOTAL bytes (in the order above: nano first), so it stays a few hundred KB.
# Prints one line per corpus; exit 1 if no plan could be made.
set -u
BUILD=${1:?usage: seeds.sh BUILD OUT [--kernels]}
OUT=${2:?usage: seeds.sh BUILD OUT [--kernels]}
KERNELS=${3:-}
ZINFC=$BUILD/bin/zinfc
MAX_PLAN=${MAX_PLAN:-65536}
MAX_TOTAL=${MAX_TOTAL:-409600}
export ZINF_STDLIB="$(pwd)/stdlib"

rm -rf "$OUT/frontend" "$OUT/plan" "$OUT/work"
mkdir -p "$OUT/frontend" "$OUT/plan" "$OUT/work"
W=$OUT/work

# ---- frontend: the sources as they are ----
find examples stdlib tests -path tests/fuzz/regress -prune -o -path tests/fuzz/pending -prune -o -name '*.zl' -type f -print | sort | while read -r f; do
  cp "$f" "$OUT/frontend/$(echo "$f" | tr '/' '_')"
done

# ---- the Hugging Face readers: their checked-in seeds ----
for d in tests/fuzz/seeds/*/; do
  t=$(basename "$d")
  rm -rf "${OUT:?}/$t"
  cp -r "$d" "$OUT/$t"
done

# ---- plan: targets and pins ----
target() { # NAME RANKS: a host target file
  cat > "$W/$1.zl" <<EOF
target $1 {
  backend = "host"
  ranks = $2
  budget = 256 MiB
  cpu  { memory = 4 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["/tmp/zinf-nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB }
}
EOF
}
target host1 1
target host2 2
# a probed target: every measured figure, timed kernel calls and NVMe transfers (zinfprobe's keys)
cat > "$W/probed.zl" <<EOF
target probed {
  backend = "host"
  ranks = 2
  budget = 256 MiB
  cpu  { memory = 4 GiB; bandwidth = 20 GB/s; cores = 2; flops = 80 G; launch_us = 0.1; copy_us = 0.01; wake_us = 30;
         cache = 32768 KiB; cache_bandwidth = 50 GB/s; adam_bandwidth = 25 GB/s; read_bandwidth = 22 GB/s }
  efficiency { gemm = 0.9; attention = 0.25; norm = 0.1; elementwise = 0.4; activation = 0.15 }
  kernels { gemm = [2.1e6, 25.8, 6.7e7, 881]; attention = [4.2e6, 186]; norm = [163840, 23]; elementwise = [20480, 0.8];
            activation = [655360, 69] }
  nvme { paths = ["/tmp/zinf-nvme"]; read = 2.5 GB/s; write = 4 GB/s; capacity = 4 GiB; latency_us = 60; request_us = 3.6;
         cpu_us = 24; reads = [4096, 4.8, 62, 65536, 24.5, 85]; writes = [4096, 4.9, 68, 1048576, 238, 255] }
  net  { bandwidth = 2 GB/s; latency_us = 110 }
}
EOF

# with_plan SRC NAME 'settings': SRC with a plan block appended
with_plan() {
  cp "$1" "$W/$2.zl"
  printf 'plan {\n%s\n}\n' "$3" >> "$W/$2.zl"
}

made=0 total=0
keep() { # FILE NAME: into the corpus if it fits
  size=$(wc -c < "$1")
  [ "$size" -le "$MAX_PLAN" ] && [ $((total + size)) -le "$MAX_TOTAL" ] || return 1
  cp "$1" "$OUT/plan/$2.plan"
  made=$((made + 1)) total=$((total + size))
}
compile() { # NAME SRC TARGET: a host plan
  "$ZINFC" "$2" --target "$3" --kernels=none -o "$W/$1.plan" > "$W/$1.log" 2>&1 && keep "$W/$1.plan" "$1"
}

NANO=tests/fuzz/models/nano.zl
if [ "$KERNELS" = --kernels ]; then
  if ! { "$ZINFC" "$NANO" --target "$W/host1.zl" --kernels=sm_80 -o "$W/nano-cuda.plan" > "$W/nano-cuda.log" 2>&1 &&
         "$BUILD/fuzz-replay/shrink_kernels" "$W/nano-cuda.plan" "$W/nano-cuda-small.plan" &&
         keep "$W/nano-cuda-small.plan" nano-cuda-1rank; }; then
    echo "seeds: no plan with CUDA launches (NVRTC?): $(tail -1 "$W/nano-cuda.log")"
  fi
fi
compile nano-host "$NANO" host
compile nano-1rank "$NANO" "$W/host1.zl"
compile nano-2rank "$NANO" "$W/host2.zl"
compile nano-probed-2rank "$NANO" "$W/probed.zl"
cat "$NANO" "$W/probed.zl" > "$OUT/frontend/nano-probed.zl"
with_plan "$NANO" nano-nvme 'params = "nvme"; optimizer = "nvme"; grads = "cpu"; whole_below = 0'
compile nano-nvme-1rank "$W/nano-nvme.zl" "$W/host1.zl"
compile nano-nvme-2rank "$W/nano-nvme.zl" "$W/host2.zl"
# NVMe state overlapped: speculative Adams on staged state, twins on NVMe, the redo range
with_plan "$NANO" nano-nvme-overlap 'params = "nvme"; optimizer = "nvme"; grads = "cpu"; whole_below = 0; optimizer_overlap = "on"'
compile nano-nvme-overlap-2rank "$W/nano-nvme-overlap.zl" "$W/host2.zl"
with_plan "$NANO" nano-cpu 'params = "cpu"; optimizer = "cpu"; checkpoints = "cpu"; prefetch = 2; whole_below = 1000'
compile nano-cpu-2rank "$W/nano-cpu.zl" "$W/host2.zl"
with_plan "$NANO" nano-tiles 'tiles "wte" = 4; whole_below = 0'
compile nano-tiles-1rank "$W/nano-tiles.zl" "$W/host1.zl"
compile nano-tiles-2rank "$W/nano-tiles.zl" "$W/host2.zl"

for f in tests/e2e/models/*.zl; do
  compile "$(basename "$f" .zl)-host" "$f" host
done
# the examples with one layer and short sequences: the same models, small
# enough to be seeds (one rank: no collectives, half the instructions)
for f in examples/*.zl; do
  base=$(basename "$f" .zl)
  sed -e 's/\bL = [0-9]*/L = 1/' -e 's/\bT = [0-9]*/T = 16/' "$f" > "$W/$base-small.zl"
  compile "$base-small-1rank" "$W/$base-small.zl" "$W/host1.zl"
done

rm -rf "$W"
echo "seeds: $(ls "$OUT/frontend" | wc -l) sources in $OUT/frontend, $made plans in $OUT/plan ($(du -sk "$OUT/plan" | cut -f1) KB)"
[ "$made" -gt 0 ]
