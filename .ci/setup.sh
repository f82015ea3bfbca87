#!/usr/bin/env bash
# Creates .venv (Python >= 3.12) and installs pallas_flash with its test and
# benchmark extras.  Idempotent; everything the project needs comes from here.
set -euo pipefail
cd "$(dirname "$0")/.."

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

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  rm -rf .venv
  "$(find_python)" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[test,bench]"
.venv/bin/python -c 'import jax, pallas_flash; print("pallas_flash ready: jax", jax.__version__, jax.default_backend())'
