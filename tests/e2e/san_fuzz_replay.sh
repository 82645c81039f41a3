#!/bin/sh
# The fuzz targets' inputs under the build's sanitizers (run in the ASan +
# UBSan pass of make test; docs/testing.md, "Fuzzing"): every input that
# ever crashed (tests/fuzz/regress/{frontend,plan}), the seed corpora made
# by tests/fuzz/seeds.sh from this build's zinfc, and a short deterministic
# fuzz of the seeds (each mutated by the targets' own mutators), through the
# replay binaries, which link the same harnesses as make fuzz's libFuzzer
# binaries. A crash or sanitizer report fails it. Inputs whose fix is still
# pending (tests/fuzz/pending) are not replayed.
#   sh tests/e2e/san_fuzz_replay.sh BUILD
set -eu
BUILD=${1:-build}
R=$BUILD/fuzz-replay
for t in frontend plan; do
  [ -x "$R/$t" ] || { echo "no $R/$t: build with make first"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# fuzz_plan keeps its NVMe swap files in TMPDIR
export TMPDIR="$tmp"

sh tests/fuzz/seeds.sh "$BUILD" "$tmp/seeds"
echo "regression corpus:"
"$R/frontend" --quiet tests/fuzz/regress/frontend
"$R/plan" --quiet tests/fuzz/regress/plan
echo "seed corpus:"
"$R/frontend" --quiet "$tmp/seeds/frontend"
"$R/plan" --quiet "$tmp/seeds/plan"
echo "mutants of the seeds:"
"$R/plan" --quiet --mutate "${FUZZ_REPLAY_MUTANTS:-500}" "$tmp/seeds/plan"
"$R/frontend" --quiet --mutate 50 "$tmp/seeds/frontend"
echo "san_fuzz_replay: ok"
