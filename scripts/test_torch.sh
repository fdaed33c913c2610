#!/usr/bin/env bash
# `make test-torch TORCH=X.Y.Z`: the package built for another torch release and the whole Python
# suite run against it (docs/versions.md). Its own venv (.venv-torch-X.Y.Z) and build tree
# (build/python-X.Y.Z), so nothing of the default .venv/ and build/release is touched.
# `scripts/test_torch.sh X.Y.Z --install-only` stops once the package is installed; other
# arguments after the release go to pytest.
#
# The package is installed the way a user installs it, `pip install --no-build-isolation .` into an
# environment that has torch, not as the editable install of .venv/. The suite then runs from this
# tree with PYTHONSAFEPATH=1 (inherited by every child interpreter), so that `import torch_openreg`
# finds the installed package and never the source folder in the working directory.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: scripts/test_torch.sh X.Y.Z}
VENV=.venv-torch-$VERSION
BUILD=build/python-$VERSION

OPENREG_SETUP_VENV=$VENV OPENREG_SETUP_TORCH=$VERSION scripts/setup.sh
PYTHON=$VENV/bin/python
echo "test-torch: building and installing torch_openreg for torch $VERSION ($BUILD)"
OPENREG_CMAKE_BUILD_DIR=$BUILD PIP_CONSTRAINT=$VENV/constraints.txt "$PYTHON" -m pip install -q \
  --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps .
"$PYTHON" -m pip check
# `make conformance-pytorch TORCH=X.Y.Z` wants the package current, not the suite.
[ "${2:-}" = --install-only ] && exit 0
echo "test-torch: the Python suite on torch $VERSION"
PYTHONSAFEPATH=1 OPENREG_CMAKE_BUILD_DIR=$BUILD OPENREG_WHEEL_TEST=link \
  "$PYTHON" -m pytest -q tests "${@:2}"
