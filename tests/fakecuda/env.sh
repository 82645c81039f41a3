# tests/fakecuda/env.sh: sourced (`. tests/fakecuda/env.sh || exit 1`) by the
# e2e scripts that run zinfrun on the fake CUDA driver. Needs B (the build
# tree) and W (the script's temporary directory). Builds the fakes (their
# log in $W/fake.log) and sets FAKE (their folder), UNITS (the emulated
# kernels' folder) and ZINF_CACHE_DIR (NVRTC's cache); false, having said
# why, when they do not build.
if sh tests/fakecuda/build.sh "$B" > "$W/fake.log" 2>&1; then
  FAKE="$B/fakecuda" UNITS="$B/fakecuda/units"
  mkdir -p "$UNITS"
  export ZINF_CACHE_DIR="$B/fakecuda/nvrtc-cache"
else
  tail -5 "$W/fake.log"; echo "FAIL: the fake driver did not build"; false
fi
