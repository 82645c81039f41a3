# Sourced by test scripts: ZINF_PY is the Python of the environment that
# `make deps` makes (tests/deps.sh), or empty when there is none; a script
# that needs it says "skip ..." then. ZINF_PY may be set by the caller.
if [ -z "${ZINF_PY:-}" ]; then
  _zc=${ZINF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zinf}
  if [ -x "$_zc/venv/bin/python" ]; then ZINF_PY="$_zc/venv/bin/python"; else ZINF_PY=""; fi
  unset _zc
fi
