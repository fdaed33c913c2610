#!/usr/bin/env bash
# Installs what building and testing OpenReg needs on a Debian machine. Idempotent: packages
# already installed are not touched, and nothing is downloaded when nothing is missing.
set -euo pipefail

APT_PACKAGES=(cmake make g++ ccache googletest libgtest-dev clang-format python3 python3-venv python3-dev
              valgrind)  # valgrind: the speed guard counts instructions under callgrind (tests/speed_guard.py)
# `scripts/setup.sh abi` (make test-abi): also clang and LLVM's C++ standard library, to build
# libopenreg with another compiler and standard library than the PyTorch layer (docs/runtime.md,
# "The C ABI"). `make test` does not need them.
if [ "${1:-}" = abi ]; then
  APT_PACKAGES+=(clang libc++-dev libc++abi-dev)
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python environment: .venv/ at the repository root, with torch (2.13.0, the CPU build, from a
# local file on the project's machines) and the test dependencies. `make test-torch TORCH=X.Y.Z`
# makes another one per release (OPENREG_SETUP_VENV=.venv-torch-X.Y.Z OPENREG_SETUP_TORCH=X.Y.Z).
# Each is remade only when
# requirements-dev.txt changes. The torch release is pinned by a constraints file given to every
# pip call, so that no dependency can move it; for a release above this machine's pip cap
# (/etc/xdg/pip: torch<=2.14.1), our constraints file replaces the machine's (PIP_CONSTRAINT).
VENV=${OPENREG_SETUP_VENV:-.venv}
TORCH=${OPENREG_SETUP_TORCH:-2.13.0}
STAMP=$VENV/.requirements-installed
if [ ! -f "$STAMP" ] || [ requirements-dev.txt -nt "$STAMP" ] || [ "$(cat "$STAMP")" != "torch==$TORCH" ]; then
  echo "setup: preparing $VENV (torch $TORCH and the test dependencies)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  echo "torch==$TORCH" > "$VENV/constraints.txt"
  PIP_CONSTRAINT="$VENV/constraints.txt" "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "torch==$TORCH" -r requirements-dev.txt
  echo "torch==$TORCH" > "$STAMP"
fi
