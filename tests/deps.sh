#!/bin/sh
# Installs the Debian packages zinf needs, only those missing.
# Used by `make deps` and .ci/run.
set -e
PKGS="re2c lemon check libsubunit-dev liburing-dev libopenmpi-dev openmpi-bin libopenblas-dev pkg-config clang libomp-dev fio python3"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "deps: all present"
  exit 0
fi
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
