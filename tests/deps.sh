#!/bin/sh
# Installs the Debian packages zinf needs, only those missing.
# Used by `make deps` and .ci/run.
set -e
PKGS="re2c lemon check libsubunit-dev liburing-dev libopenmpi-dev openmpi-bin libopenblas-dev pkg-config clang libomp-dev fio python3"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ -z "$missing" ]; then
  echo "deps: Debian packages all present"
else
  echo "deps: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
# The safetensors export is checked with the reference Python reader.
if ! python3 -c 'import safetensors, numpy' 2>/dev/null; then
  echo "deps: installing safetensors and numpy from PyPI"
  python3 -m pip install -q safetensors numpy || echo "deps: pip install failed; the safetensors check will be skipped"
fi
