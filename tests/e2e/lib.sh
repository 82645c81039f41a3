# The set-up the end-to-end scripts share; a script sources it from the
# repository root after setting B (the build directory):
#   B=${1:-build}
#   . tests/e2e/lib.sh
#
#   e2e_workdir NAME     W: a fresh directory (/tmp/zinf-NAME.XXXXXX) that is
#                        removed when the script exits (not when KEEP is set);
#                        TMPDIR becomes W/tmp, so Open MPI's session
#                        directory and every program's temporary files are
#                        this script's own (two mpiruns sharing a TMPDIR race
#                        on creating <tmp>/ompi.<host>.<uid>). E2E_AT_EXIT,
#                        when set, is evaluated first at exit (to stop a
#                        background job).
#   e2e_mpi              the Open MPI environment of the tests: running as
#                        root allowed, shared memory between ranks, more
#                        ranks than cores, one OpenMP thread per rank
#   e2e_own_tmp DIR      a TMPDIR of its own for one mpirun started beside
#                        another of the same script: e2e_own_tmp "$W/a" sets
#                        TMPDIR to it (run it in the subshell of that job)
#   e2e_skip WHY         says why the script cannot run here and exits 77,
#                        which tests/run.sh records as a skip
#   e2e_skip_part WHY    says why a part of the script cannot run here; the
#                        script goes on, and e2e_end makes its verdict a skip
#                        if nothing failed
#   e2e_need_bin P...    $B/bin/P for each P, or a skip naming it
#   e2e_need_py WHAT     ZINF_PY (tests/pyenv.sh), or a skip saying that the
#                        Python environment with WHAT is missing
#   ok MSG / bad MSG     a check's verdict: "ok   MSG", or "FAIL: MSG" and the
#                        script will fail
#   e2e_close G W TOL    true when G is within TOL of W, relative:
#                        |G - W| <= TOL * |W| (false when either is empty)
#   e2e_host_target FILE NAME BUDGET
#                        writes FILE: target NAME, the host backend, one
#                        rank, a device budget of BUDGET (e.g. "1 GiB"), a
#                        small CPU (2 cores, 8 GiB, 20 GB/s, 20 GFLOP/s)
#   e2e_kernels_emu NAME N LINES ONLY
#                        the script NAME's run of tests/gpu/check_kernels.sh
#                        --emu --only ONLY (kernel families on the host
#                        emulator, the harness built under $B) in a fresh
#                        workdir with its own kernel cache: shows the last
#                        LINES lines and exits 1 unless exactly N cases
#                        PASS and the closing line says none failed; then
#                        says "NAME: ok"
#   e2e_kv_verdict N ROWS TOL FRAC SLACK WHAT WINDOW
#                        the verdict of a zinfgen --decode kv comparison of
#                        the CUDA and the host decoder (below)
#   e2e_end [FAIL]       ends the script: 1 if FAIL is not 0 or any bad, else
#                        77 if a part was skipped, else 0
# Exit codes are the verdict (tests/run.sh): 0 passed, 77 skipped, any
# other failed. The hf_* functions at the end are those of the Hugging Face
# scripts (hf_gemma.sh, hf_phi3.sh).

e2e_failed=0
e2e_skipped=0
# zinfc with no target measures this machine once and caches it in the
# user's cache (docs/tuning.md): the tests plan from what sysconf says, as
# on a machine never measured, unless ZINF_PROBE is set (tests/e2e/probe.sh
# and probe_cache.sh set their own), and never write the user's cache
export ZINF_PROBE="${ZINF_PROBE-none}"

e2e_workdir() {
  E2E_DIR=$(mktemp -d "/tmp/zinf-$1.XXXXXX") || { echo "FAIL: cannot make a temporary directory"; exit 1; }
  W=$E2E_DIR
  mkdir -p "$W/tmp" || exit 1
  export TMPDIR="$W/tmp"
  trap 'eval "${E2E_AT_EXIT:-}"; [ -n "${KEEP:-}" ] || rm -rf "$E2E_DIR"' EXIT
  trap 'exit 1' INT TERM HUP
}

e2e_mpi() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
    OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
}

e2e_own_tmp() {
  mkdir -p "$1" || exit 1
  export TMPDIR="$1"
}

e2e_skip() {
  echo "skip: $*"
  exit 77
}

e2e_skip_part() {
  echo "skip: $*"
  e2e_skipped=1
}

e2e_need_bin() {
  for _p in "$@"; do
    [ -x "$B/bin/$_p" ] || e2e_skip "$B/bin/$_p is not built"
  done
}

e2e_need_py() {
  . tests/pyenv.sh
  [ -n "$ZINF_PY" ] || e2e_skip "no Python environment with $1 (make deps makes it)"
}

ok() { echo "ok   $*"; }

bad() { echo "FAIL: $*"; e2e_failed=1; }

e2e_close() { awk -v g="$1" -v w="$2" -v t="$3" 'BEGIN { e = (g - w) / w; if (e < 0) e = -e; exit !(g != "" && w != "" && e <= t) }'; }

e2e_host_target() {
  cat > "$1" <<EOT
target $2 {
  backend = "host"
  ranks = 1
  budget = $3
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
}
EOT
}

e2e_kernels_emu() {
  _name=$1
  e2e_workdir "$_name"
  export ZINF_CACHE_DIR="$W/cache"
  _out=$(BUILD="$B" sh tests/gpu/check_kernels.sh --emu --only "$4" 2>&1)
  _rc=$?
  echo "$_out" | tail -n "$3"
  [ $_rc -eq 0 ] || { echo "$_name: check_kernels --emu failed (exit $_rc)"; exit 1; }
  _n=$(echo "$_out" | grep -c " PASS ")
  [ "$_n" -eq "$2" ] || { echo "$_name: expected $2 passing cases, got $_n"; exit 1; }
  # its closing line, "N cases, U units compiled for ARCH, 0 failed (host time ...)"
  echo "$_out" | grep -q "^$2 cases, [0-9]* units compiled for [^,]*, 0 failed (" ||
    { echo "$_name: no closing line \"$2 cases, ..., 0 failed\""; exit 1; }
  echo "$_name: ok"
}

e2e_end() {
  if [ "${1:-0}" -ne 0 ] || [ "$e2e_failed" -ne 0 ]; then exit 1; fi
  [ "$e2e_skipped" -eq 0 ] || exit 77
  exit 0
}

# The checks of an hf_*.py export's output DIR.export.out for case C (hf_gemma.sh,
# hf_phi3.sh): its keys, transformers' loss on it against zinf's GOT and, with
# NEXT set, the trained export's loss against zinf's step 3 (DIR.next.losses),
# each to 1e-5 relative. Uses the calling script's bad.
hf_export_checks() { # C DIR GOT NEXT
  c=$1; d=$2; got=$3; next=$4
  if [ -n "$next" ]; then
    z3=$(awk '$1 == "step" && $2 == 3 { print $4 }' "$d.next.losses")
    nx=$(awk '$1 == "next" { print $3, $4, $5, $6 }' "$d.export.out")
    # shellcheck disable=SC2086
    set -- $nx
    if [ "${1:-}" != missing=0 ] || [ "${2:-}" != unexpected=0 ]; then grep "^next" "$d.export.out"; bad "$c: keys of the trained export"
    elif e2e_close "$z3" "${3:-}" 1e-5 && ! e2e_close "$z3" "${4:-}" 1e-5; then
      echo "ok $c: after 2 steps, transformers' loss on the export $3, zinf's step 3 $z3 (before training $4)"
    else bad "$c: after 2 steps, transformers' loss on the export ${3:-}, zinf's step 3 $z3, the weights before training ${4:-}"; fi
  fi
  grep -q "^keys $c missing=0 unexpected=0 " "$d.export.out" || { cat "$d.export.out"; bad "$c: export keys"; }
  el=$(awk '$1 == "loss" { print $3 }' "$d.export.out")
  if e2e_close "$el" "$got" 1e-5; then echo "ok $c: export loads, transformers' loss on it $el"
  else bad "$c: transformers' loss on the export $el, zinf's $got"; fi
}

# The mapping checks of hf_gemma.sh and hf_phi3.sh: tests/e2e/hf_from.py batch
# on BATCH (lines "check C HF DIR CONFIG"), then "ok C: the mapping covers the
# checkpoint" for each case C of CASES (the first word of each of its lines),
# else the calling script's bad.
hf_mapping_checks() { # CASES BATCH
  "$ZINF_PY" tests/e2e/hf_from.py batch "$2" > "$2.out" 2> "$2.log"
  _rc=$?
  [ $_rc -eq 0 ] || { cat "$2.out" "$2.log"; bad "hf_from.py batch exited $_rc"; }
  # shellcheck disable=SC2013 # a case is a word
  for c in $(cut -d' ' -f1 "$1"); do
    if grep -qx "result check $c 0" "$2.out"; then echo "ok $c: the mapping covers the checkpoint"
    else grep -v '^result ' "$2.out"; bad "$c: the mapping does not cover the checkpoint"; fi
  done
}

# A config.json (on stdin) that zinfc --from-hf --seq SEQ must refuse: exit
# 1 and MESSAGE in its errors; "ok error NAME", else the calling script's
# bad. The model directory is $W/err-NAME (hf_gemma.sh, hf_phi3.sh).
hf_expect() { # NAME SEQ 'MESSAGE' < config.json text
  e=$W/err-$1
  mkdir -p "$e"
  cat > "$e/config.json"
  "$B/bin/zinfc" --from-hf "$e" --seq "$2" --emit=zl > "$e/out" 2> "$e/err"
  _rc=$?
  if [ $_rc -ne 1 ]; then cat "$e/err"; bad "$1: exit $_rc, expected 1"; return; fi
  grep -qF -- "$3" "$e/err" || { cat "$e/err"; bad "$1: no '$3'"; return; }
  echo "ok error $1"
}

# The verdict of a zinfgen --decode kv comparison on the CUDA backend
# (eval_gen_cuda.sh, moe_gen_cuda.sh), from the files $W/N.*: kc and kh the
# tokens of the cuda and the host decoder, lc and lh their --logits (ROWS
# rows), ekc the cuda run's stderr and, when WINDOW is 1, wh the tokens of
# the host's window decode. The stderr must say the decoder ran on the cuda
# backend; the tokens must be equal (and not empty); the logits within TOL
# of the largest of the host's plus SLACK, and at most FRAC of them not
# equal. Prints "ok   N: WHAT: TOKENS; logits differ by ..." and returns 0,
# else a FAIL line and returns 1.
e2e_kv_verdict() { # N ROWS TOL FRAC SLACK WHAT WINDOW
  _n=$1 _rows=$2 _tol=$3 _frac=$4 _slack=$5 _what=$6 _win=$7
  if ! grep -q "on the cuda backend, KV cache of T = 16 positions" "$W/$_n.ekc"; then
    cat "$W/$_n.ekc"; echo "FAIL $_n: --decode kv did not say it runs on the cuda backend"; return 1
  fi
  _d=$(awk -v rows="$_rows" 'NR == FNR { for (i = 1; i <= NF; i++) a[FNR, i] = $i; n = FNR; w = NF; next }
           { for (i = 1; i <= NF; i++) { x = $i - a[FNR, i]; if (x < 0) x = -x; if (x > m) m = x; nd += x > 0; nv++
                                         y = a[FNR, i]; if (y < 0) y = -y; if (y > big) big = y }
             if (NF != w) bad = 1; k = FNR }
           END { if (bad || k != n || n != rows) print "shape"; else printf "%.3g %.3g %d %d\n", m, big, nd, nv }' "$W/$_n.lh" "$W/$_n.lc")
  if [ -s "$W/$_n.kc" ] && cmp -s "$W/$_n.kc" "$W/$_n.kh" && { [ "$_win" != 1 ] || cmp -s "$W/$_n.kc" "$W/$_n.wh"; } &&
     echo "$_d" | awk -v t="$_tol" -v f="$_frac" -v s="$_slack" 'NF == 4 && $1 <= t * $2 + s && $3 <= f * $4 { ok = 1 } END { exit !ok }'; then
    echo "ok   $_n: $_what: $(cat "$W/$_n.kc"); logits differ by" \
         "$(echo "$_d" | awk '{ printf "%s (largest %s; %d of %d differ)", $1, $2, $3, $4 }')"
  else
    echo "FAIL $_n: kv cuda [$(cat "$W/$_n.kc")] kv host [$(cat "$W/$_n.kh")]$([ "$_win" != 1 ] || echo " window [$(cat "$W/$_n.wh")]"); logits: $_d"
    return 1
  fi
}
