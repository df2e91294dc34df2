#!/usr/bin/env bash
# Install what the Python door's tests need (tests/python): a virtual
# environment .venv in the checkout (git-ignored) with PyTorch and pytest
# from PyPI, and pytorch-optimizer (the reference NorMuon that
# tests/python/test_normuon.py compares with; pure Python, needs only torch
# and numpy, so it pulls no second torch). A venv, not the system pip: torch and its CUDA wheels are ~5 GB
# and pin their own dependencies; inside .venv they cannot clash with
# Debian's python3 packages (PEP 668) and removing .venv undoes it all.
# Idempotent: returns at once when .venv already imports torch, pytest and
# pytorch_optimizer.
# Usage: scripts/setup-python.sh   (STRATA_TORCH_SPEC overrides "torch>=2.4")
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import torch, pytest, pytorch_optimizer" 2>/dev/null; then
  exit 0
fi
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  if ! python3 -m venv "$VENV" 2>/dev/null; then
    # Debian's python3 needs python3-venv for ensurepip
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3-venv >/dev/null
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
fi
echo "setup-python: installing torch and pytest into $VENV (PyPI; a few minutes the first time)"
"$VENV/bin/python" -m pip install -q "${STRATA_TORCH_SPEC:-torch>=2.4}" pytest numpy \
  pytorch-optimizer
echo "setup-python: done in $(( $(date +%s) - start )) s ($("$VENV/bin/python" -c \
  'import torch; print("torch", torch.__version__)'))"
