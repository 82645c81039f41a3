#!/bin/sh
# zinfdump --compare: a measured step (zinfrun --trace, 2 ranks on the host
# backend) against the cost model: the per-queue and per-class tables with
# ratios, both critical paths, each rank's file named by its rank; a trace
# of another plan, a truncated one and an empty one refused with one line
# and exit 1. Then the picture, looked at as a person would: --svg rendered
# to PNG (rsvg-convert, from `make deps`), the critical path's outline
# colour on it, the measured lanes below the predicted ones, the memory
# curve under both, and the axis labels in the XML. And --calibrate: a
# target from the run's kernel and collective times.
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_bin zinfc zinfrun zinfdump zinftok
e2e_workdir compare
e2e_mpi
D="$B/bin/zinfdump"
fail=0
say() { echo "FAIL: $*"; fail=1; }
sed -e 's/ranks = 4/ranks = 2/' -e 's/target host {/target host2 {/' examples/targets/host.zl > "$W/t2.zl"
"$B/bin/zinftok" /usr/share/common-licenses/GPL-3 -o "$W/train.bin" > /dev/null || exit 1
"$B/bin/zinfc" tests/e2e/models/gpt-micro.zl --target "$W/t2.zl" -o "$W/m.plan" > /dev/null || { echo "FAIL: zinfc"; exit 1; }
timeout 120 mpirun -np 2 --oversubscribe "$B/bin/zinfrun" "$W/m.plan" --data "$W/train.bin" --steps 2 --nvme "$W" --quiet \
    --trace "$W/run.json" < /dev/null > "$W/out" 2>&1 || { echo "FAIL: zinfrun"; cat "$W/out"; exit 1; }

# zinfrun's summary names the queue whose busy time is furthest from its
# prediction: recomputed here from its own "queue busy per step" line,
# whose 0.1 ms rounding can tie queues: any within it of the largest will do
want=$(awk '/^queue busy per step/ { best = -1
  for (i = 7; i + 2 < NF; i += 3) { m = $(i + 1); p = $(i + 2); gsub(/[()]/, "", p); d = m - p; if (d < 0) d = -d
    q[$i] = d; if (d > best) best = d }
  s = ""; for (k in q) if (q[k] >= best - 0.1 - 1e-9) s = s (s ? "|" : "") k; print s }' "$W/out")
if grep -Eq "^divergence: ($want) is the queue to look at: [0-9.]* ms measured against [0-9.]* predicted \([0-9.]*x\), the largest difference; " "$W/out" ||
   grep -q "^divergence: every queue's busy time is within " "$W/out"; then echo "ok   zinfrun's summary names the queue to look at ($want)"
else say "zinfrun's divergence line (want $want)"; grep -E "^(queue busy|divergence)" "$W/out"; fi

# the table: every queue and a kernel class with a ratio, both critical paths
"$D" "$W/m.plan" --compare "$W/run.json" > "$W/cmp" 2> "$W/err" || { say "--compare: exit $?"; cat "$W/err"; }
grep -q "^compare: gpt_micro on host2, 2 ranks: the cost model against $W/run.json (rank 0), \([0-9]*\) of \1 instructions measured$" "$W/cmp" \
    || say "no header naming rank 0 with every instruction measured"
grep -q "^pass: predicted [0-9.]* ms, measured [0-9.]* ms, ratio [0-9.]*$" "$W/cmp" || say "no pass line"
num='[0-9][0-9.]*'
for q in nvme h2d d2h comm compute cpu; do
  grep -q "^  $q  *[0-9]*  *$num  *$num  *\($num\|-\)  *[-+]$num$" "$W/cmp" || say "no row for queue $q"
done
for c in "kernel fwd linear" "kernel bwd linear" "kernel fwd attention" allreduce cpu_adam h2d; do
  grep -q "^  $c  *[0-9]*  *$num  *$num  *$num  *[-+]$num$" "$W/cmp" || say "no row with a ratio for class '$c'"
done
# largest divergence first: the diff column's magnitudes do not grow down the class table
sed -n '/^per instruction class/,/^$/p' "$W/cmp" | awk 'NR > 2 && NF { d = $NF; sub(/^[-+]/, "", d); d += 0; if (seen && d > last + 1e-9) bad = 1; last = d; seen = 1 } END { exit bad }' \
    || say "classes are not sorted by divergence"
grep -q "^critical path, predicted: [0-9]* instructions, $num ms (busy $num ms, waiting $num ms); on " "$W/cmp" || say "no predicted critical path"
grep -q "^critical path, measured: [0-9]* instructions, $num ms (busy $num ms, waiting $num ms); on " "$W/cmp" || say "no measured critical path"
"$D" "$W/m.plan" --compare "$W/run.json.rank1" | grep -q "^compare: .*run.json.rank1 (rank 1), " || say "rank 1's file is not named rank 1"
[ $fail -eq 0 ] && echo "ok   --compare: queues, classes with ratios, both critical paths"

# bad traces: one line on stderr, nothing on stdout, exit 1
refused() { # name pattern file
  "$D" "$W/m.plan" --compare "$3" > "$W/o" 2> "$W/e"; rc=$?
  [ $rc -eq 1 ] || say "$1: exit $rc, expected 1"
  [ "$(wc -l < "$W/e")" -eq 1 ] && [ ! -s "$W/o" ] || { say "$1: not one line on stderr alone"; cat "$W/e" "$W/o"; }
  grep -q -- "$2" "$W/e" || { say "$1: did not say '$2'"; cat "$W/e"; }
}
"$B/bin/zinfc" tests/e2e/models/llama-micro.zl --target "$W/t2.zl" -o "$W/other.plan" > /dev/null && "$D" "$W/other.plan" --trace "$W/other.json" \
    || say "planning another model"
refused "another plan's trace" "a trace of another plan?" "$W/other.json"
head -c 3000 "$W/run.json" > "$W/cut.json"
refused "a truncated trace" "cut.json: not valid JSON: line [0-9]*, column [0-9]*: " "$W/cut.json"
printf '{"traceEvents":[]}\n' > "$W/empty.json"
refused "an empty trace" "empty.json: no measured instructions (an empty trace)$" "$W/empty.json"
: > "$W/nothing.json"
refused "an empty file" "nothing.json: not valid JSON: " "$W/nothing.json"
refused "a missing file" "none.json: cannot read: No such file" "$W/none.json"
[ $fail -eq 0 ] && echo "ok   bad traces refused with one line and exit 1"

# --calibrate: the plan's target with the run's kernel times and, on 2
# ranks, its collectives' fit; the plan made with it predicts this run's
# kernels at what they took (the sum over every kernel class: per-size
# means, so exact but for rounding), and its collectives' queue nearer
# than before; a missing --compare is a usage error, an unwritable path
# one line and exit 1 with nothing left behind
"$D" "$W/m.plan" --compare "$W/run.json" --calibrate "$W/cal.zl" > "$W/cal.out" 2> "$W/err" || { say "--calibrate: exit $?"; cat "$W/err"; }
grep -q "^wrote $W/cal.zl: target host2 with the kernel times of $W/run.json, [0-9]* kernels: gemm [0-9]* attention [0-9]* norm [0-9]*.* timed calls; net fitted to its [0-9]* collectives; zinfc --target $W/cal.zl plans with them$" "$W/cal.out" \
    || { say "--calibrate did not say what it wrote"; tail -1 "$W/cal.out"; }
grep -q '^  kernels { # timed calls' "$W/cal.zl" && grep -q '^    gemm = \[' "$W/cal.zl" || say "cal.zl has no timed calls"
"$B/bin/zinfc" tests/e2e/models/gpt-micro.zl --target "$W/cal.zl" -o "$W/cal.plan" > "$W/err" 2>&1 || { say "cal.zl does not plan"; cat "$W/err"; }
kernels_ratio() { "$D" "$1" --compare "$W/run.json" | sed -n '/^per instruction class/,/^$/p' |
  awk '$1 == "kernel" { p += $(NF - 3); m += $(NF - 2) } END { printf "%.4f\n", m / p }'; }
comm_ratio() { "$D" "$1" --compare "$W/run.json" | awk '$1 == "comm" && NF == 6 { print $5 }'; }
r=$(kernels_ratio "$W/cal.plan")
awk -v r="$r" 'BEGIN { exit !(r > 0.97 && r < 1.03) }' && echo "ok   the calibrated plan prices this run's kernels at what they took (measured/predicted $r)" \
    || say "calibrated kernels: measured/predicted $r, not 1 (before: $(kernels_ratio "$W/m.plan"))"
c0=$(comm_ratio "$W/m.plan") c1=$(comm_ratio "$W/cal.plan")
awk -v a="$c0" -v b="$c1" 'function d(x) { return x > 1 ? x - 1 : 1 - x } BEGIN { exit !(d(b) < d(a) || d(b) < 0.2) }' \
    || say "calibrated collectives: comm measured/predicted $c1, before $c0"
"$D" "$W/m.plan" --calibrate "$W/c2.zl" > "$W/o" 2> "$W/e"; rc=$?
[ $rc -eq 2 ] && grep -q "^zinfdump: --calibrate needs --compare RUN.json" "$W/e" && [ ! -e "$W/c2.zl" ] || say "--calibrate without --compare: exit $rc"
"$D" "$W/m.plan" --compare "$W/run.json" --calibrate "$W/no/such/cal.zl" > "$W/o" 2> "$W/e"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$W/e")" -eq 1 ] && grep -q "^zinfdump: $W/no/such/cal.zl: cannot write: No such file or directory$" "$W/e" ||
  { say "--calibrate to a missing directory: exit $rc"; cat "$W/e"; }
printf '{"traceEvents":[{"name":"input","cat":"h2d","ph":"X","pid":0,"tid":1,"ts":0,"dur":1,"args":{"i":0}}]}\n' > "$W/nokernel.json"
"$D" "$W/m.plan" --compare "$W/nokernel.json" --calibrate "$W/c3.zl" > "$W/o" 2> "$W/e"; rc=$?
[ $rc -eq 1 ] && grep -q "^zinfdump: --calibrate: $W/nokernel.json has no kernel with a time" "$W/e" && [ ! -e "$W/c3.zl" ] && [ ! -e "$W/c3.zl.tmp" ] ||
  { say "--calibrate from a trace without kernels: exit $rc"; cat "$W/e"; }
[ $fail -eq 0 ] && echo "ok   --calibrate"

# --calibrate with state on NVMe: the run's transfers set the level of the
# target's timed transfers, so the plan made with it (the same plan: its
# choices pinned) prices this run's NVMe queue at what it took
cat > "$W/nv.zl" <<ZL
import "$(pwd)/tests/e2e/models/gpt-micro"
target host1 { backend = "host"; ranks = 1; budget = 1 GiB
  cpu { memory = 8 GiB; bandwidth = 20 GB/s; cores = 2; flops = 20 G }
  nvme { paths = ["$W/nvme"]; read = 1 GB/s; write = 1 GB/s; capacity = 4 GiB } }
plan { params = "nvme"; optimizer = "nvme"; grads = "cpu"; checkpoints = "gpu"; prefetch = 2; whole_below = 100;
       optimizer_overlap = "off" }
ZL
mkdir -p "$W/nvme"
"$B/bin/zinfc" "$W/nv.zl" -o "$W/nv.plan" > "$W/err" 2>&1 &&
  timeout 120 "$B/bin/zinfrun" "$W/nv.plan" --data "$W/train.bin" --steps 2 --nvme "$W/nvme" --quiet --trace "$W/nv.json" \
    > "$W/out" 2>&1 && "$D" "$W/nv.plan" --compare "$W/nv.json" --calibrate "$W/nvcal.zl" > "$W/nvcal.out" 2>&1 &&
  "$B/bin/zinfc" "$W/nv.zl" --target "$W/nvcal.zl" -o "$W/nvcal.plan" > "$W/err" 2>&1 || { say "NVMe calibration: a step failed"; cat "$W/err" "$W/out"; }
grep -q "; nvme scaled to its [0-9]* transfers (reads: drive x[0-9.]*, alone x[0-9.]*; writes: drive x[0-9.]*, alone x[0-9.]*); zinfc --target" \
  "$W/nvcal.out" || { say "--calibrate did not say how it scaled the NVMe transfers"; tail -1 "$W/nvcal.out"; }
grep -q "^ *reads = \[" "$W/nvcal.zl" && grep -q "^ *writes = \[" "$W/nvcal.zl" || say "nvcal.zl has no timed transfers"
nvme_ratio() { "$D" "$1" --compare "$W/nv.json" | awk '$1 == "nvme" && NF == 6 { print $5 }'; }
n0=$(nvme_ratio "$W/nv.plan") n1=$(nvme_ratio "$W/nvcal.plan")
awk -v r="$n1" 'BEGIN { exit !(r > 0.97 && r < 1.03) }' &&
  echo "ok   the calibrated plan prices this run's NVMe queue at what it took (measured/predicted $n1, before $n0)" ||
  say "calibrated NVMe: measured/predicted $n1, not 1 (before: $n0)"

# the picture
"$D" "$W/m.plan" --compare "$W/run.json" --svg "$W/c.svg" > /dev/null || say "--compare --svg: exit $?"
for t in "time (ms)" "0 ms" "predicted (cost model)" "measured (rank 0)" "measured compute" "critical path" "GPU memory in use"; do
  grep -q ">$t</text>" "$W/c.svg" || grep -q ">$t" "$W/c.svg" || say "svg lacks the text '$t'"
done
grep -q "budget 2.00 GiB, off the scale" "$W/c.svg" || say "svg does not note the budget off the scale"
python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$W/c.svg" || say "svg is not well-formed XML"
if ! command -v rsvg-convert > /dev/null; then
  e2e_skip_part "render: rsvg-convert is not installed (make deps installs librsvg2-bin)"
elif ! rsvg-convert "$W/c.svg" -o "$W/c.png"; then
  say "rsvg-convert could not render the svg"
else
  python3 - "$W/c.svg" "$W/c.png" <<'PY' || fail=1
import re, struct, sys, zlib
svg, png = open(sys.argv[1]).read(), open(sys.argv[2], "rb").read()
# a PNG decoder (8-bit RGB or RGBA, not interlaced), so no imaging library is needed
assert png[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(png):
    n, kind = struct.unpack(">I4s", png[pos:pos + 8]); body = png[pos + 8:pos + 8 + n]; pos += 12 + n
    if kind == b"IHDR": w, h, depth, ctype, _, _, lace = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT": idat += body
assert depth == 8 and ctype in (2, 6) and not lace, (depth, ctype, lace)
bpp = 4 if ctype == 6 else 3
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0; b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line); prev = line
def rows_of(hexcol):
    r, g, b = (int(hexcol[k:k + 2], 16) for k in (1, 3, 5))
    out = set()
    for y, line in enumerate(rows):
        for x in range(0, stride, bpp):
            if abs(line[x] - r) < 12 and abs(line[x + 1] - g) < 12 and abs(line[x + 2] - b) < 12: out.add(y); break
    return sorted(out)
def text_y(t):
    m = re.search(r'<text x="[0-9.]+" y="([0-9.]+)"[^>]*>' + re.escape(t) + '<', svg)
    assert m, "no text " + t
    return float(m.group(1))
y_pred, y_meas, y_mem = text_y("predicted (cost model)"), text_y("measured (rank 0)"), float(re.search(r'y="([0-9.]+)">GPU memory in use \(predicted\)', svg).group(1))
assert y_pred < y_meas < y_mem, (y_pred, y_meas, y_mem)
ok = True
def check(what, cond):
    global ok
    if not cond: print("FAIL: picture: " + what); ok = False
crit, compute, mem = rows_of("#e6007e"), rows_of("#2ca02c"), rows_of("#9467bd")
check("the critical path's outline (#e6007e) in the predicted lanes", any(y_pred < y < y_meas for y in crit))
check("the critical path's outline in the measured lanes", any(y_meas < y < y_mem for y in crit))
pred_c = [y for y in compute if y_pred < y < y_meas]; meas_c = [y for y in compute if y_meas < y < y_mem]
check("compute boxes (#2ca02c) in the predicted lanes", pred_c)
check("compute boxes in the measured lanes, below the predicted ones", meas_c and pred_c and min(meas_c) > max(pred_c))
check("the GPU memory curve (#9467bd) under the lanes", any(y > y_mem for y in mem))
if ok: print("ok   picture: %dx%d PNG with the critical path outlined in both timelines, measured lanes below predicted, memory below" % (w, h))
sys.exit(0 if ok else 1)
PY
fi
[ $fail -eq 0 ] && echo "zinfdump --compare: all checks pass"
e2e_end $fail
