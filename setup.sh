#!/usr/bin/env bash
# Set up cuda-agent from this checkout, on a fresh Debian or Ubuntu machine or an existing one:
#   1. with apt, as root or through sudo, the system pieces that are missing: bubblewrap (the
#      candidate sandbox), a C++ compiler, and Python's venv module and headers;
#   2. a virtualenv in .venv (or the one that is active), which sees the system's packages when
#      this Python already has torch, so an installed CUDA build of torch is kept;
#   3. torch, unless the virtualenv already imports one: the CUDA build from PyPI on a machine with
#      an NVIDIA driver, else the CPU wheel (PyPI's default Linux wheel is a multi-GB CUDA build);
#   4. this package with its agent extras, while the torch header precompiles beside it, then
#      `cuda-agent doctor` to show what is ready.
# Settings: PYTHON (default python3), VENV (default .venv), TORCH (default torch==2.13.0),
# TORCH_CPU_INDEX (default https://download.pytorch.org/whl/cpu), EXTRAS (default agent).
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH=${TORCH:-torch==2.13.0}
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
EXTRAS=${EXTRAS:-agent}

say() { printf '==> [%3ds] %s\n' "$SECONDS" "$*"; }
die() { printf 'setup.sh: %s\n' "$*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: install Python 3.10 or newer (apt-get install python3)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || die "cuda-agent needs Python 3.10 or newer"
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# 1. system packages ---------------------------------------------------------------------------
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v "${CXX:-c++}" >/dev/null 2>&1 || missing+=(g++)
if [ -z "${VIRTUAL_ENV:-}" ] && [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  missing+=("python$PYVER-venv")
fi
header=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h
[ -f "$header" ] || missing+=("python$PYVER-dev")
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    die "install these with your package manager, then run me again: ${missing[*]}"
  fi
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    die "run as root, or install sudo, to install: ${missing[*]} (apt-get install -y ${missing[*]})"
  fi
  say "installing ${missing[*]} (apt-get install, as root)"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. virtualenv --------------------------------------------------------------------------------
if [ -n "${VIRTUAL_ENV:-}" ]; then
  say "using the active virtualenv $VIRTUAL_ENV"
  VPY="$VIRTUAL_ENV/bin/python"
else
  if [ ! -x "$VENV/bin/python" ]; then
    if "$PYTHON" -c 'import torch' 2>/dev/null; then
      say "creating $VENV over $PYTHON's packages (keeping its torch)"
      "$PYTHON" -m venv --system-site-packages "$VENV"
    else
      say "creating $VENV"
      "$PYTHON" -m venv "$VENV"
    fi
  fi
  VPY="$VENV/bin/python"
fi

# 3. torch -------------------------------------------------------------------------------------
if "$VPY" -c 'import torch' 2>/dev/null; then
  say "keeping torch $("$VPY" -c 'import torch; print(torch.__version__, torch.version.cuda and "(CUDA build)" or "(CPU build)")')"
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  say "installing $TORCH (CUDA build, for the GPU nvidia-smi lists)"
  "$VPY" -m pip install -q "$TORCH"
else
  # pip may already be pointed at a CPU wheel (a local wheelhouse or mirror); otherwise take it
  # from the CPU index instead of PyPI's CUDA build.
  chosen=$("$VPY" -m pip install -q --dry-run --no-deps --ignore-installed --report - "$TORCH" 2>/dev/null |
           "$VPY" -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["metadata"]["version"])' \
           2>/dev/null || true)
  if [[ "$chosen" == *+cpu ]]; then
    say "installing $TORCH (the CPU wheel $chosen that pip is configured with)"
    "$VPY" -m pip install -q "$TORCH"
  else
    say "installing $TORCH (the CPU wheel from $TORCH_CPU_INDEX)"
    "$VPY" -m pip install -q "$TORCH" --index-url "$TORCH_CPU_INDEX" --extra-index-url https://pypi.org/simple
  fi
fi

# 4. cuda-agent, while the torch header precompiles beside it (a minute or two, once per torch
# install; the first evaluation would otherwise wait for it) ---------------------------------------
say "precompiling the torch header in the background (once per machine and torch install)"
header_log=$(mktemp)
PYTHONPATH=src "$VPY" -c '
from cuda_agent.env.builds.toolchain import prepare_toolchain
from cuda_agent.env.config import default_cache_dir, detect_backend
prepare_toolchain(detect_backend(), default_cache_dir() / "build")' >"$header_log" 2>&1 &
header_job=$!
say "installing cuda-agent[$EXTRAS] (editable)"
"$VPY" -m pip install -q -e ".[$EXTRAS]"
say "waiting for the torch header"
if wait "$header_job"; then
  rm -f "$header_log"
else
  say "the header did not precompile (see $header_log); the first build will try again"
fi
say "checking the machine (cuda-agent doctor)"
"$(dirname "$VPY")/cuda-agent" doctor || true
say "ready: $(dirname "$VPY")/cuda-agent eval   (or activate it: . $(dirname "$VPY")/activate)"
