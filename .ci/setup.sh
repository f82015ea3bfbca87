#!/usr/bin/env bash
# Creates .venv (Python >= 3.12) and installs pallas_flash with its test and
# benchmark extras on the oldest JAX it supports (.ci/oldest.txt, pinned).
# Idempotent; everything the project needs comes from here.
#
#   bash .ci/setup.sh            .venv, jax/jaxlib exactly as .ci/oldest.txt
#   bash .ci/setup.sh --newest   .venv-newest, the newest jax/jaxlib that
#                                pyproject.toml allows, installed before the
#                                project; checks that installing the project
#                                keeps that JAX (no downgrade)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv newest=0
if [ "${1:-}" = "--newest" ]; then venv=.venv-newest newest=1; fi

find_python() {
  local cands=("${PYTHON:-}" python3.13 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    for d in "$(pyenv root)"/versions/3.1[2-9]*; do cands+=("$d/bin/python3"); done
  fi
  for d in "$HOME"/.pyenv/versions/3.1[2-9]* /root/.pyenv/versions/3.1[2-9]*; do
    cands+=("$d/bin/python3")
  done
  cands+=(python3)
  for p in "${cands[@]}"; do
    [ -n "$p" ] || continue
    if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
      echo "$p"; return 0
    fi
  done
  echo "pallas_flash needs Python >= 3.12 (JAX 0.11); set PYTHON=/path/to/python3.12" >&2
  return 1
}

if [ ! -x $venv/bin/python ] || ! $venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  rm -rf $venv
  "$(find_python)" -m venv $venv
fi
py=$venv/bin/python
$py -m pip install -q --upgrade pip >/dev/null
if [ $newest = 0 ]; then
  $py -m pip install -q -c .ci/oldest.txt -e ".[test,bench]"
  want=$(sed -n 's/^jax==//p' .ci/oldest.txt)
else
  # pyproject's own jax/jaxlib requirements, newest release in range first.
  mapfile -t reqs < <($py -c 'import re, tomllib
for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    if re.match(r"jax(lib)?\b", d): print(d)')
  $py -m pip install -q --upgrade "${reqs[@]}"
  want=$($py -c 'import jax; print(jax.__version__)')
  $py -m pip install -q -e ".[test,bench]"
fi
$py - "$want" <<'PY'
import sys, jax, jaxlib, pallas_flash
want = sys.argv[1]
print(f"pallas_flash ready: jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
      f"{jax.default_backend()} ({sys.prefix})")
if jax.__version__ != want:
    sys.exit(f"expected jax {want}, installing the project gave {jax.__version__}")
PY
