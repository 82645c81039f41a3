#!/bin/sh
# tests/gpu/bundle.sh [DIR]: packs what tests/gpu/run_all.sh needs on a GPU
# machine that has the CUDA toolkit but none of this project's packages
# (MPI, liburing, OpenBLAS, Check, re2c, Lemon): the built binaries, the
# shared libraries they load from this machine (not libc, not the CUDA
# driver, NVRTC or NCCL, which the GPU machine's own are), stdlib/ and
# examples/. Default DIR: .gpubundle (git-ignored). Run after `make`.
set -eu
cd "$(dirname "$0")/../.."
D=${1:-.gpubundle}
rm -rf "$D"
mkdir -p "$D/bin" "$D/lib"
for b in zinfc zinfrun zinfdump zinftok zinfgen zinfref zinfprobe; do cp "build/bin/$b" "$D/bin/"; done
for b in "$D"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' | while read -r l; do
    case "$(basename "$l")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libnvrtc*|libnccl*|libgcc_s*|libstdc++*) ;;
      *) cp -L -n "$l" "$D/lib/" ;;
    esac
  done
done
# the bundle travels to the GPU machine: without debug sections it is about 10 MiB smaller
strip --strip-debug "$D"/bin/* "$D"/lib/* 2> /dev/null || true
du -sh "$D" | sed 's/^/bundle: /'
