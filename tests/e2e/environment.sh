#!/bin/sh
# The ZINF_* environment variables (docs/environment.md): each runtime
# program reads them in one place (runtime/main_env.h) and refuses a bad
# value before doing anything else, naming the variable, with exit 2; a good
# value reaches the library it is for. (tests/e2e/layering.sh checks that no
# library reads one itself.)
#   sh tests/e2e/environment.sh [BUILD]
B=${1:-build}
. tests/e2e/lib.sh
e2e_need_bin zinfrun zinfgen zinfprobe zinfref
e2e_workdir environment

# refused PROGRAM "VAR=VALUE" MESSAGE ARGS...: exit 2 and exactly MESSAGE
refused() {
  prog=$1 set=$2 want=$3; shift 3
  env "$set" "$B/bin/$prog" "$@" > "$W/out" 2>&1 < /dev/null; rc=$?
  got=$(cat "$W/out")
  if [ $rc = 2 ] && [ "$got" = "$want" ]; then ok "$prog with $set: refused"
  else bad "$prog with $set: exit $rc, said: $got (expected exit 2 and: $want)"; fi
}
refused zinfrun ZINF_COMM_TIMEOUT=soon "zinfrun: ZINF_COMM_TIMEOUT=soon: not a number of seconds above 0" m.plan --data t.bin
refused zinfrun ZINF_NVME_NOBATCH=yes "zinfrun: ZINF_NVME_NOBATCH=yes: not 0 or 1" m.plan --data t.bin
refused zinfrun ZINF_QUEUE_SLICE_US=-5 "zinfrun: ZINF_QUEUE_SLICE_US=-5: not a whole number from 0 to 1000000" m.plan --data t.bin
refused zinfrun ZINF_THREADS=0 "zinfrun: ZINF_THREADS=0: not a whole number from 1 to 4096" m.plan --data t.bin
refused zinfgen ZINF_ADAM_ISA=sse9 "zinfgen: ZINF_ADAM_ISA=sse9: not scalar, avx2, avx512 or auto" m.plan --prompt-ids 1
refused zinfprobe ZINF_NVME_SYNC=on "zinfprobe: ZINF_NVME_SYNC=on: not 0 or 1" -o "$W/p.zl"
refused zinfref ZINF_HK_ISA=avx9 "zinfref: ZINF_HK_ISA=avx9: not scalar, avx2, avx512 or auto" m.zl --data t.bin
refused zinfrun ZINF_TEST_NODE_SPLIT=two "zinfrun: ZINF_TEST_NODE_SPLIT=two: not a whole number from 1 to 1048576" m.plan --data t.bin
refused zinfrun ZINF_CUBLASLT=off "zinfrun: ZINF_CUBLASLT=off: not 0 or 1" m.plan --data t.bin

# good values reach the run: a small training job with every host-side
# variable set says what they chose
"$B/bin/zinfc" examples/gpt2-tiny.zl --target host --ranks 1 -o "$W/m.plan" > "$W/c.out" 2>&1 || { cat "$W/c.out"; bad "zinfc"; e2e_end; }
head -c 40000 README.md > "$W/text.txt"
"$B/bin/zinftok" "$W/text.txt" -o "$W/t.bin" > "$W/t.out" 2>&1 || { cat "$W/t.out"; bad "zinftok"; e2e_end; }
if ZINF_HK_ISA=scalar ZINF_ADAM_ISA=scalar ZINF_THREADS=1 ZINF_NVME_SYNC=1 ZINF_NVME_NOBATCH=1 ZINF_QUEUE_SLICE_US=0 \
   ZINF_NVME_HUGEPAGES=0 ZINF_COMM_TIMEOUT=60 timeout 300 "$B/bin/zinfrun" "$W/m.plan" --data "$W/t.bin" --nvme "$W" \
   --steps 1 < /dev/null > "$W/run.out" 2>&1; then
  grep -q "threads: 1 per rank (ZINF_THREADS).*kernels scalar" "$W/run.out" && ok "ZINF_THREADS and ZINF_HK_ISA reach the host kernels" \
    || bad "the thread line does not show ZINF_THREADS=1 and ZINF_HK_ISA=scalar: $(grep threads: "$W/run.out")"
  grep -q "^  cpu adam: scalar$" "$W/run.out" && ok "ZINF_ADAM_ISA reaches the CPU Adam" \
    || bad "ZINF_ADAM_ISA=scalar: $(grep 'cpu adam' "$W/run.out")"
else
  bad "zinfrun with good values failed: $(tail -5 "$W/run.out")"
fi

# OpenBLAS's kernels (runtime/hostk/blas_core.h): a program whose OpenBLAS fell back to
# Prescott's (or an older core) for a model it does not know starts again with the
# processor's (OPENBLAS_VERBOSE=2 prints the core each time the library loads); a user's
# OPENBLAS_CORETYPE is kept
for prog in zinfrun zinfgen zinfprobe zinfref; do
  env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$B/bin/$prog" --help > "$W/blas.out" 2>&1 < /dev/null
  core=$(sed -n 's/^Core: //p' "$W/blas.out" | tail -1)
  if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    case $(echo "$core" | tr 'A-Z' 'a-z') in
      '' | prescott | core2 | penryn | dunnington | nehalem | atom | unknown)
        bad "$prog: OpenBLAS runs '$core' kernels on a processor with AVX2: $(grep Core "$W/blas.out" | tr '\n' ' ')" ;;
      *) ok "$prog: OpenBLAS runs $core kernels ($(sed -n 's/^Core: //p' "$W/blas.out" | tr '\n' ' ' | sed 's/ $//'))" ;;
    esac
  else
    ok "$prog: no AVX2 here, OpenBLAS keeps its '$core'"
  fi
done
OPENBLAS_CORETYPE=Prescott OPENBLAS_VERBOSE=2 "$B/bin/zinfrun" --help > "$W/blas.out" 2>&1 < /dev/null
if [ "$(sed -n 's/^Core: //p' "$W/blas.out" | tr '\n' ' ')" = "Prescott " ]; then ok "OPENBLAS_CORETYPE=Prescott is kept (one load, those kernels)"
else bad "OPENBLAS_CORETYPE=Prescott not kept: $(grep Core "$W/blas.out" | tr '\n' ' ')"; fi
e2e_end
