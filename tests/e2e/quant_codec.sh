#!/bin/sh
# The quantized storage of frozen weights (runtime/hostk/quant.h) against a
# numpy reference of the published schemes (tests/e2e/quant_codec.py):
# bitsandbytes' NF4 and the per-block absmax int8, on normal values, values
# over nine decades, a zero block, every NF4 level, the midpoints between
# levels and a short last block. The C codec's encoded bytes and decoded
# values must equal the reference's bit for bit.
#   tests/e2e/quant_codec.sh BUILD
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_py numpy
[ -x "$B/tools/quant_codec" ] || e2e_skip "$B/tools/quant_codec is not built"
e2e_workdir quant_codec
"$ZINF_PY" tests/e2e/quant_codec.py make "$W" || { echo "FAIL: making the values"; exit 1; }
fail=0
for k in nf4 int8; do
  "$B/tools/quant_codec" $k "$W/x.f32" "$W/$k.q" "$W/$k.f32" || { echo "FAIL: quant_codec $k"; fail=1; continue; }
  "$ZINF_PY" tests/e2e/quant_codec.py check "$W" $k || fail=1
done
# a kind it does not know is refused
if "$B/tools/quant_codec" fp4 "$W/x.f32" "$W/a" "$W/b" 2>/dev/null; then echo "FAIL: quant_codec took fp4"; fail=1; fi
exit $fail
