#!/bin/sh
# Runs every benchmark of a build tree, one table each:  tests/bench/run.sh BUILD
# Benchmarks with known arguments get them here; others run with none.
# A benchmark that fails is reported and the rest still run; the exit code
# says whether all of them ran.
BUILD=${1:-build}
status=0
# A TMPDIR of the run's own: Open MPI's session directory under it is not
# shared with a test run or another benchmark run on this machine (two
# mpiruns creating <tmp>/ompi.<host>.<uid> at once can fail; docs/testing.md).
BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/zinf-bench.XXXXXX") || exit 1
trap 'rm -rf "$BENCH_TMP"' EXIT
export TMPDIR="$BENCH_TMP"
# The Python with torch, for the peers of bench_adam and the scripts (ZINF_PY, or empty).
. tests/pyenv.sh
export ZINF_PY
if ! command -v fio >/dev/null 2>&1; then
  echo "note: fio is not installed (make deps installs it); bench_nvme prints no peer figure"
fi
for b in "$BUILD"/bench/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  case "$name" in
    bench_nvme) set -- --dir "$BUILD/bench-nvme" --size 1G --bs 1M,128K --qd 32 ;;
    bench_adam) set -- --n 67108864 --reps 5 ;;
    *) set -- ;;
  esac
  echo "== $name $*"
  if ! "$b" "$@"; then
    echo "== $name FAILED"
    status=1
  fi
  echo
done
rm -rf "$BUILD/bench-nvme"
for s in tests/bench/bench_*.sh; do
  [ -f "$s" ] || continue
  echo "== $(basename "$s" .sh)"
  if ! sh "$s" "$BUILD"; then echo "== $(basename "$s" .sh) FAILED"; status=1; fi
  echo
done
# The cost model against measurement, before and after zinfprobe (about a minute).
echo "== fidelity"
if ! sh tests/bench/fidelity.sh "$BUILD"; then echo "== fidelity FAILED"; status=1; fi
echo
exit $status
