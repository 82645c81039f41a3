#!/bin/sh
# The fuzz targets' inputs under the build's sanitizers (run in the ASan +
# UBSan pass of make test; docs/testing.md, "Fuzzing"): every input that
# ever crashed (tests/fuzz/regress/{frontend,plan,json,safetensors,hfconfig,hftok,chattmpl}) and the seed corpora made
# by tests/fuzz/seeds.sh from this build's zinfc, through the replay
# binaries, which link the same harnesses as make fuzz's libFuzzer binaries.
# A crash or sanitizer report fails it. Inputs whose fix is still pending
# (tests/fuzz/pending) are not replayed.
#   [FUZZ_REPLAY_MUTANTS=N] sh tests/e2e/san_fuzz_replay.sh BUILD
# With N > 0 it then also runs N mutants of each plan seed and N/10 of each
# source (the targets' own mutators, deterministic): a short fuzz run under
# gcc's sanitizers (about a minute). It is off in make test: mutants go
# wherever the mutators take them, into bugs nobody has triaged yet as
# readily as into what a change broke (500 of them reached verify.c's shard
# overflow while its fix was pending), and make test should fail for the
# latter.
set -eu
BUILD=${1:-build}
R=$BUILD/fuzz-replay
HF="json safetensors hfconfig hftok chattmpl"
for t in frontend plan $HF; do
  [ -x "$R/$t" ] || { echo "no $R/$t: build with make first"; exit 1; }
done
# fuzz_plan keeps its NVMe swap files in TMPDIR, which e2e_workdir makes W/tmp
. tests/e2e/lib.sh
e2e_workdir fuzz-replay; tmp=$W

sh tests/fuzz/seeds.sh "$BUILD" "$tmp/seeds"
echo "regression corpus:"
"$R/frontend" --quiet tests/fuzz/regress/frontend
"$R/plan" --quiet tests/fuzz/regress/plan
for t in $HF; do
  if [ -d "tests/fuzz/regress/$t" ]; then "$R/$t" --quiet "tests/fuzz/regress/$t"; fi
done
echo "seed corpus:"
"$R/frontend" --quiet "$tmp/seeds/frontend"
"$R/plan" --quiet "$tmp/seeds/plan"
for t in $HF; do
  "$R/$t" --quiet "$tmp/seeds/$t"
done
N=${FUZZ_REPLAY_MUTANTS:-0}
if [ "$N" -gt 0 ]; then
  echo "mutants of the seeds:"
  "$R/plan" --quiet --mutate "$N" "$tmp/seeds/plan"
  "$R/frontend" --quiet --mutate $((N / 10)) "$tmp/seeds/frontend"
fi
echo "san_fuzz_replay: ok"
