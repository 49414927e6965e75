#!/bin/bash
# A folder of wheels from which pip installs the daemon with no index: what the install test
# (install.test.mjs) gives the extension's "Install" instead of PyPI, since its network
# namespace has no network.
#
# usage: wheelhouse.sh PYTHON LLAMA_WHEELS_DIR OUT_DIR
#   PYTHON: the project's .venv Python (has the build backend, and the versions to pin)
#   LLAMA_WHEELS_DIR: where `make install` keeps the llama-cpp-python wheel it compiled
# The project's wheel is built each time (from the working tree, reusing the native build in
# build/); the dependencies are pinned to the .venv's versions and downloaded once: a later run
# finds them all in OUT_DIR and needs no network.
set -euo pipefail
PY=${1:?usage: wheelhouse.sh PYTHON LLAMA_WHEELS_DIR OUT_DIR}
LLAMA=${2:?LLAMA_WHEELS_DIR missing}
OUT=${3:?OUT_DIR missing}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PIP=("$PY" -m pip --disable-pip-version-check --no-input)

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/lookahead_lsp-*.whl
"${PIP[@]}" wheel --quiet --no-deps --no-build-isolation "$REPO" -w "$OUT"
cp "$LLAMA"/llama_cpp_python-*.whl "$OUT"/

# The .venv's versions of everything the daemon needs, as constraints (direct references such
# as the project itself cannot be constraints).
"${PIP[@]}" freeze --exclude lookahead-lsp --exclude llama-cpp-python | grep -E '^[A-Za-z0-9_.-]+==' > "$OUT/constraints.txt"
wanted=("$OUT"/lookahead_lsp-*.whl "$OUT"/llama_cpp_python-*.whl)
"${PIP[@]}" download --quiet --no-index --find-links "$OUT" -c "$OUT/constraints.txt" -d "$OUT" "${wanted[@]}" 2>/dev/null ||
  "${PIP[@]}" download --quiet --only-binary=:all: -c "$OUT/constraints.txt" -d "$OUT" "${wanted[@]}"
echo "wheelhouse: $(ls "$OUT"/*.whl | wc -l) wheels in $OUT"
