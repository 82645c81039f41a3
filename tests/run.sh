#!/bin/sh
# Runs one pass of the suite against a build tree and records the results.
#   tests/run.sh BUILD MODE [unit | NAME...]
# MODE is "plain" or "asan"; "unit" runs the Check suites alone, NAMEs
# (e2e/X, unit/test_X, golden) only those tests. Every test is a program or
# script whose exit code is the verdict: 0 passed, 77 skipped (it cannot run
# here: the Python environment, a program or a tool that make deps installs
# is missing; the test says why on a line "skip: WHY"; automake's
# convention), any other failed. Results go to BUILD/results (one line per
# test: pass, skip or fail, then its name) and the summary is printed by
# tests/summary.sh. Each test runs with a TMPDIR of its own, removed after
# it, so that two runs of the suite on one machine (or two tests) never
# share Open MPI's session directory <tmp>/ompi.<host>.<uid>: its creation
# races between mpiruns started at once.
#
# ZINF_TEST_JOBS tests run at once (default 2: many tests keep one core
# busy, waiting on Python or one process; 1 runs them one after another),
# the longest first, each printing its line when it ends. Two kinds of
# test are kept apart:
# - CHAINS run one after another, never beside each other: they build and
#   run the same program (tests/gpu/check_kernels.sh writes
#   BUILD/gpu/check_kernels);
# - ALONE run at the end, one at a time with nothing beside them: they
#   wait for a signal, a file or a daemon within seconds, or measure the
#   machine.
BUILD=$1
MODE=$2
shift 2 2> /dev/null
RES="$BUILD/results"
export ZINF_BUILD="$BUILD" ZINF_TEST_MODE="$MODE"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# LeakSanitizer cannot run under ptrace (some sandboxes); leaks are still
# checked where it can run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

run_one() { # name command...
  name=$1; shift
  log="$BUILD/logs/$(echo "$name" | tr '/' '_').log"
  start=$(date +%s)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/zinf-test.XXXXXX") || { echo "fail $name" >> "$RES"; return; }
  TMPDIR=$tmp "$@" > "$log" 2>&1
  rc=$?
  rm -rf "$tmp"
  case $rc in
    0) echo "pass $name" >> "$RES"; status=PASS ;;
    77) echo "skip $name: $(grep '^skip: ' "$log" | tail -1 | cut -c7-)" >> "$RES"; status=SKIP ;;
    *) echo "fail $name" >> "$RES"; status=FAIL ;;
  esac
  end=$(date +%s)
  # the test's lines printed at once, not between another's
  {
    printf '%-5s %-40s %4ss  [%s]\n' "$status" "$name" "$((end - start))" "$MODE"
    # the failed checks first (with what each printed after it), then the log's end
    if [ $status = FAIL ]; then
      grep -A6 '^FAIL' "$log" | head -30 | sed 's/^/    ! /'
      sed 's/^/    | /' "$log" | tail -40
    fi
    if [ $status = SKIP ]; then grep '^skip: ' "$log" | sed 's/^/    | /'; fi
  } > "$log.line"
  cat "$log.line"
  rm -f "$log.line"
}

run_named() { # name: the test of that name
  case $1 in
    unit/*) run_one "$1" "$BUILD/tests/${1#unit/}" ;;
    golden) run_one golden sh tests/golden/run.sh "$BUILD" check ;;
    e2e/*) run_one "$1" sh "tests/e2e/${1#e2e/}.sh" "$BUILD" ;;
    *) echo "fail $1: no such test" >> "$RES"; echo "FAIL  $1: no such test" ;;
  esac
}

# xargs runs a line of the queue: its tests one after another
if [ "${1:-}" = --item ]; then
  shift
  for n in "$@"; do run_named "$n"; done
  exit 0
fi

mkdir -p "$BUILD/logs"
: > "$RES"
ONLY=${1:-}
# every test of this pass, in the order of a serial run
all=$(
  for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && echo "unit/$(basename "$t")"
  done
  [ "$ONLY" = unit ] && exit 0
  [ -f tests/golden/run.sh ] && echo golden
  for s in tests/e2e/*.sh; do
    [ -f "$s" ] || continue
    case "$MODE:$(basename "$s")" in
      *:lib.sh) ;; # the scripts' shared set-up, sourced by them: not a test
      asan:san_*|plain:*) echo "e2e/$(basename "$s" .sh)" ;;
    esac
  done)
if [ -n "$ONLY" ] && [ "$ONLY" != unit ]; then all=$*; fi

# Started first, the longest (a clean clone's run on 2 cores, 2026-12: a
# minute or more each), so that the last minutes are not one long test.
LONG="unit/test_nvrtc e2e/gpu_kernels_emu e2e/hf_finetune e2e/hf_gemma e2e/hf_phi3 e2e/cuda_fake e2e/gpu_compile_all
      e2e/moe_hf e2e/moe e2e/cuda_long_fake e2e/optim_state e2e/lora e2e/qlora e2e/moe_gen_cuda
      unit/test_plan unit/test_autodiff"
CHAINS="e2e/gpu_kernels_emu e2e/gpu_kernels_emu_long"
ALONE="e2e/ckpt_kill e2e/run_nothing_lost e2e/run_errors e2e/san_ckpt_policy e2e/san_cuda_nvme e2e/san_robust
       e2e/slurm e2e/probe e2e/probe_cache e2e/probe_gpu"
has() { # word list...: true when the word is in the list
  w=$1; shift
  for x in "$@"; do [ "$x" = "$w" ] && return 0; done
  return 1
}
# shellcheck disable=SC2086 # the lists are words without blanks
{
  chain=""
  for n in $CHAINS; do has "$n" $all && chain="$chain $n"; done
  for n in $LONG; do
    has "$n" $all || continue
    if has "$n" $CHAINS; then [ -n "$chain" ] && echo $chain; chain=""; else echo "$n"; fi
  done
  [ -n "$chain" ] && echo $chain
  for n in $all; do has "$n" $LONG $CHAINS $ALONE || echo "$n"; done
} > "$BUILD/queue"
jobs=${ZINF_TEST_JOBS:-2}
case $jobs in '' | *[!0-9]* | 0) jobs=1 ;; esac # xargs -P 0 would run every test at once
xargs -P "$jobs" -L 1 sh "$0" "$BUILD" "$MODE" --item < "$BUILD/queue" ||
  echo "run.sh: xargs exited $? before the queue's end" >&2
# a test that never ran (xargs stopped early) fails rather than vanishing from the summary
# shellcheck disable=SC2013 # the queue's words are test names
for n in $(cat "$BUILD/queue"); do
  awk -v n="$n" '{ sub(/:$/, "", $2) } $2 == n { found = 1 } END { exit !found }' "$RES" ||
    echo "fail $n: not run" >> "$RES"
done
# shellcheck disable=SC2086
for n in $ALONE; do has "$n" $all && run_named "$n"; done
exit 0
