#!/bin/sh
# Installs the Debian packages zinf needs, only those missing.
# Used by `make deps` and .ci/run.
set -e
# slurmctld slurmd slurm-client munge: the single-machine Slurm of
# tests/e2e/slurm.sh (about 12 MB; their srun --mpi=pmix plugin is in
# slurm-wlm-basic-plugins, which they pull in, and uses Open MPI's libpmix2)
PKGS="re2c lemon check libsubunit-dev liburing-dev zlib1g-dev libzstd-dev libopenmpi-dev openmpi-bin libopenblas-dev pkg-config clang libomp-dev fio python3 librsvg2-bin slurmctld slurmd slurm-client munge"
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
# Python checks (the safetensors export, the Hugging Face bridge, tokenizers,
# LoRA) run against the libraries people use: one virtual environment in a
# cache outside the clone, made once and reused by later clones and CI runs
# (torch is large: it is never installed twice). tests/pyenv.sh finds it.
ZINF_CACHE=${ZINF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zinf}
VENV="$ZINF_CACHE/venv"
PYPKGS="torch transformers tokenizers safetensors peft numpy tensorboard"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch, transformers, tokenizers, safetensors, peft, numpy, tensorboard' 2>/dev/null; then
  echo "deps: Python environment present ($VENV)"
else
  echo "deps: making the Python environment $VENV ($PYPKGS; once)"
  mkdir -p "$ZINF_CACHE"
  if ! [ -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" || { dpkg-query -W python3-venv > /dev/null 2>&1 || { $SUDO apt-get update -qq; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv; }; python3 -m venv "$VENV"; }
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip > /dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install -q $PYPKGS || { echo "deps: pip install into $VENV failed"; exit 1; }
fi
