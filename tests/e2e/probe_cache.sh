#!/bin/sh
# zinfc with no target measures this machine once (zinfprobe --quick here)
# and caches it under XDG_CACHE_HOME/zinf, keyed by the machine: the first
# plan writes the cache and says so, the second reads it (no second probe:
# the file and its time are unchanged, the message says cached), --reprobe
# measures again, a corrupt cache is refused with a message and measured
# again, a cache for other ranks is measured again (2 ranks under mpirun,
# with the collectives), and --target probe is the same cache. zinfprobe --repeat keeps medians and prints the spread.
# The user's own cache is never touched (XDG_CACHE_HOME is the test's).
#   tests/e2e/probe_cache.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_workdir probe_cache
unset ZINF_PROBE
export XDG_CACHE_HOME="$W/cache" ZINF_PROBE_ARGS="--quick --repeat 2"
zc() { "$B/bin/zinfc" examples/gpt2-tiny.zl -o "$W/t.plan" "$@" > "$W/zc.log" 2> "$W/zc.err"; }
probe() { ls "$XDG_CACHE_HOME"/zinf/probe-*-*c-*g.zl 2> /dev/null; }

zc --ranks 1 || { cat "$W/zc.log" "$W/zc.err"; bad "the first plan with no target"; }
f=$(probe)
[ -n "$f" ] && [ "$(echo "$f" | wc -l)" = 1 ] && ok "the first plan wrote one probe file: $(basename "$f")" || bad "no probe file in $XDG_CACHE_HOME/zinf"
grep -q "^target: measuring this machine for 1 rank with zinfprobe (not measured yet), once: cached in $f\$" "$W/zc.log" &&
  grep -q "^target: probe_[A-Za-z0-9_]*, measured by zinfprobe, wrote $f\$" "$W/zc.log" && ok "it said it measured and wrote the cache" ||
  { cat "$W/zc.log"; bad "no message of the measurement"; }
grep -q "^repeated 2 times, each figure the median; spread" "$W/zc.err" && ok "the probe repeated and reported the spread" ||
  { cat "$W/zc.err"; bad "no spread from zinfprobe --repeat 2"; }
grep -q "on probe_[A-Za-z0-9_]*, 1 rank," "$W/zc.log" || bad "the plan is not for the probed machine"
grep -q '^  kernels {' "$f" || bad "the cache lacks the timed kernel calls"
[ -z "$(ls "$XDG_CACHE_HOME/zinf/nvme")" ] || bad "the probe left files in its NVMe folder"
cp -p "$f" "$W/first.zl"
touch -d '2001-01-01 00:00' "$f"

zc --ranks 1 || bad "the second plan"
grep -q "^target: probe_[A-Za-z0-9_]*, measured by zinfprobe, from $f (cached; zinfc --reprobe measures again)\$" "$W/zc.log" &&
  ! grep -q "measuring" "$W/zc.log" && ! grep -q "^repeated" "$W/zc.err" && ok "the second plan read the cache, no probe" ||
  { cat "$W/zc.log"; bad "the second plan did not say it read the cache"; }
[ -z "$(find "$f" -newer "$W/first.zl")" ] && cmp -s "$f" "$W/first.zl" && ok "the cache is unchanged" || bad "the cache was rewritten"

zc --ranks 1 --reprobe || bad "--reprobe"
grep -q "^target: measuring this machine for 1 rank with zinfprobe (--reprobe)" "$W/zc.log" && [ -n "$(find "$f" -newer "$W/first.zl")" ] &&
  ok "--reprobe measured again and rewrote the cache" || { cat "$W/zc.log"; bad "--reprobe did not measure again"; }

printf 'target probe_x {\n  cpu { memory = \n' > "$f"
zc --ranks 1 || { cat "$W/zc.log" "$W/zc.err"; bad "a plan over a corrupt cache"; }
grep -q "^target: the cached probe $f is not a target (.*error.*): it is refused and this machine measured again\$" "$W/zc.log" &&
  grep -q "^target: measuring this machine for 1 rank with zinfprobe (the cached probe was refused)" "$W/zc.log" &&
  grep -q '^  kernels {' "$f" && ok "a corrupt cache was refused, measured again and rewritten" ||
  { cat "$W/zc.log"; bad "a corrupt cache"; }

zc --ranks 2 || bad "--ranks 2"
grep -q "^target: measuring this machine for 2 ranks with zinfprobe (the cached probe is for 1 rank)" "$W/zc.log" &&
  grep -q '^  ranks = 2$' "$f" && ok "a cache for other ranks was measured again" || { cat "$W/zc.log"; bad "a cache for 1 rank, planning 2"; }
if command -v mpirun > /dev/null; then
  grep -q '^  net  {' "$f" && grep -q '^collectives (MPI, 2 ranks)' "$W/zc.err" && ok "2 ranks were measured under mpirun, collectives too" ||
    { cat "$W/zc.err"; bad "no collectives in the 2-rank probe"; }
else
  e2e_skip_part "no mpirun: the collectives of the 2-rank probe (make deps installs Open MPI)"
fi
"$B/bin/zinfc" examples/gpt2-tiny-offload.zl --target probe --ranks 2 -o "$W/o.plan" > "$W/zo.log" 2>&1 || { cat "$W/zo.log"; bad "--target probe"; }
grep -q "(cached; zinfc --reprobe measures again)" "$W/zo.log" && grep -q "on probe_[A-Za-z0-9_]*, 2 ranks," "$W/zo.log" &&
  ok "--target probe planned the model with a target block for the cached probe" || { cat "$W/zo.log"; bad "--target probe did not read the cache"; }

# ZINF_PROBE=none: no probe, no cache; a failing zinfprobe: one error, exit 1
rm -rf "$XDG_CACHE_HOME"
ZINF_PROBE=none "$B/bin/zinfc" examples/gpt2-tiny.zl -o "$W/n.plan" > "$W/n.log" 2>&1 || bad "ZINF_PROBE=none"
[ -e "$XDG_CACHE_HOME" ] && bad "ZINF_PROBE=none measured"
ZINF_PROBE_ARGS="--bogus" "$B/bin/zinfc" examples/gpt2-tiny.zl -o "$W/n.plan" > "$W/b.log" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "error: measuring this machine failed" "$W/b.log" && ok "a failing probe: exit 1 with a message" ||
  { cat "$W/b.log"; bad "a failing probe: exit $rc"; }
e2e_end
