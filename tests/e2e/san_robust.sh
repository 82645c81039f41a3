#!/bin/sh
# Robustness of zinfc --check on damaged sources: every example (and the
# stdlib files it imports) truncated at many points, with single bytes
# replaced, and with one word or number replaced by another (which mostly
# parses, so the checker sees it), at deterministic positions (an LCG with a fixed seed). Each run
# must end within 10 s with exit 0 or 1, exit 1 must print an "error:" line,
# and no sanitizer report may appear. Runs in the plain and the asan builds.
# The variants are made first, in order (the LCG's), then checked two at a
# time (each run is one short zinfc on its own files), then judged in order.
#   tests/e2e/san_robust.sh BUILD
B=${1:-build}
Z="$B/bin/zinfc"
[ -x "$Z" ] || { echo "FAIL: $Z not built"; exit 1; }
. tests/e2e/lib.sh
e2e_workdir robust; T=$W
mkdir -p "$T/inc"

seed=12345
rnd() { # rnd N -> $r in [0, N)
  seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
  r=$(( (seed / 65536) % $1 ))
}

# bytes to plant: structure, digits, quotes, a newline, NUL-ish and high bytes
nbytes=20
byte_at() { # byte_at K -> octal of the K-th planted byte
  j=0
  for b in 173 175 050 051 133 135 054 075 072 042 043 060 071 012 170 055 000 377 056 052; do
    [ $j -eq "$1" ] && { oct=$b; return; }
    j=$((j + 1))
  done
}

fail=0
nfail=0
n=0
check() { # check FILE [-I dir] : variant n, run later by run_all
  n=$((n + 1))
  printf '%s\n' "$VARIANT" > "$T/name$n"
  # shellcheck disable=SC2016
  printf 'timeout 10 "$0" --check' > "$T/job$n"
  for a in "$@"; do printf " '%s'" "$a" >> "$T/job$n"; done
  printf ' > /dev/null 2> %s/err%d; echo $? > %s/rc%d\n' "$T" "$n" "$T" "$n" >> "$T/job$n"
}
run_all() { # every variant's run, two at a time
  i=1
  while [ $i -le $n ]; do echo "$T/job$i"; i=$((i + 1)); done | xargs -P 2 -n 1 sh -c '. "$1"' "$Z"
}
judge() { # judge K: the verdict on variant K, as its run left it
  VARIANT=$(cat "$T/name$1"); rc=$(cat "$T/rc$1" 2> /dev/null || echo 255); cp "$T/err$1" "$T/err" 2> /dev/null || : > "$T/err"
  [ -n "$ROBUST_DEBUG" ] && echo "rc=$rc $VARIANT"
  if grep -q "AddressSanitizer\|LeakSanitizer\|runtime error:" "$T/err"; then
    nfail=$((nfail + 1)); fail=1
    echo "FAIL: sanitizer report on variant $1 ($VARIANT)"; [ $nfail -le 3 ] && grep -A6 "AddressSanitizer\|LeakSanitizer\|runtime error:" "$T/err" | head -8
  elif [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
    nfail=$((nfail + 1)); fail=1
    echo "FAIL: exit $rc on variant $1 ($VARIANT)"; [ $nfail -le 3 ] && tail -5 "$T/err"
  elif [ $rc -eq 1 ] && ! grep -q "error:" "$T/err"; then
    nfail=$((nfail + 1)); fail=1
    echo "FAIL: exit 1 without an error line on variant $1 ($VARIANT)"; [ $nfail -le 3 ] && head -5 "$T/err"
  fi
}

mutate() { # mutate SRC DST: truncation or byte replacement, chosen by the LCG
  len=$(wc -c < "$1")
  [ "$len" -gt 1 ] || { cp "$1" "$2"; return; }
  rnd "$len"; k=$r
  if [ "$MODE" = token ]; then
    # replace the k-th word or number with another that parses: exercises the checker
    rnd 1000000; k=$r
    rnd 14; w=$(echo "0 -1 3 9223372036854775807 1.5 x D B heads block wte param T 4096" | cut -d' ' -f$((r + 1)))
    awk -v k="$k" -v w="$w" '
      { lines[NR] = $0 }
      END {
        n = 0
        for (i = 1; i <= NR; i++) { s = lines[i]; while (match(s, /[A-Za-z_0-9.]+/)) { n++; s = substr(s, RSTART + RLENGTH) } }
        if (n == 0) { for (i = 1; i <= NR; i++) print lines[i]; exit }
        t = k % n; c = 0
        for (i = 1; i <= NR; i++) {
          s = lines[i]; out = ""
          while (match(s, /[A-Za-z_0-9.]+/)) {
            tok = substr(s, RSTART, RLENGTH)
            out = out substr(s, 1, RSTART - 1) (c == t ? w : tok)
            c++; s = substr(s, RSTART + RLENGTH)
          }
          print out s
        }
      }' "$1" > "$2"
    VARIANT="$(basename "$1") token $k := $w"
  elif [ "$MODE" = trunc ]; then
    head -c "$k" "$1" > "$2"
    VARIANT="$(basename "$1") cut at $k"
  else
    rnd "$nbytes"; byte_at "$r"
    { head -c "$k" "$1"; printf "\\$oct"; tail -c +"$((k + 2))" "$1"; } > "$2"
    VARIANT="$(basename "$1") byte $k := \\$oct"
  fi
}

PER=${ZINF_ROBUST_PER:-8}
for f in examples/*.zl examples/zero-infinity/*.zl stdlib/nn.zl stdlib/llama.zl stdlib/olmo2.zl; do
  [ -f "$f" ] || continue
  for MODE in trunc byte token; do
    i=0
    while [ $i -lt "$PER" ]; do
      case "$f" in
        stdlib/*)
          # a damaged stdlib file, imported by a tiny model
          mkdir -p "$T/inc$((n + 1))"
          mutate "$f" "$T/inc$((n + 1))/$(basename "$f")"
          case "$f" in *llama*) m=examples/llama-tiny.zl ;; *olmo2*) m=tests/e2e/models/olmo2-micro.zl ;;
            *) m=examples/gpt2-tiny.zl ;; esac
          check "$m" -I "$T/inc$((n + 1))" ;;
        *)
          mutate "$f" "$T/v$((n + 1)).zl"
          check "$T/v$((n + 1)).zl" ;;
      esac
      i=$((i + 1))
    done
  done
done
run_all
k=1
while [ $k -le $n ]; do judge $k; k=$((k + 1)); done
# the unharmed examples pass
for f in examples/*.zl examples/zero-infinity/*.zl; do
  VARIANT="$f as is"
  timeout 10 "$Z" --check "$f" > /dev/null 2> "$T/err" || { echo "FAIL: $f does not check"; cat "$T/err"; fail=1; }
done
echo "san_robust: $n variants, $nfail failed"
exit $fail
