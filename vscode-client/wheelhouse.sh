#!/bin/bash
# The wheels a platform .vsix carries in wheelhouse/ (`make vsix-linux-x64`), from which the
# extension's Install puts the daemon into its environment with no compiler and no package index:
# the daemon's wheel for each PYTHON (its native core is built for one CPython version), the
# portable llama-cpp-python wheel (llama.cpp compiled once; it works with any Python 3) and, for
# each PYTHON, the wheels of every dependency, chosen by that Python's own pip (its version's
# markers and wheel tags).
#
# usage: wheelhouse.sh VENV_PYTHON LLAMA_WHEELS_DIR OUT_DIR [PYTHON...]
#   VENV_PYTHON: the project's .venv Python: the dependencies are pinned to its versions
#     (another PYTHON gets the newest release up to that version which supports it: numpy drops
#     old Pythons first); also the default PYTHON
#   LLAMA_WHEELS_DIR: the cached llama-cpp-python build (the Makefile's avx2 one on x86-64)
#   OUT_DIR: made anew, holding only wheels
#   PYTHON: interpreters to build the daemon's wheel for (names on PATH or paths). One that has
#     the build backend (the .venv's) builds offline, reusing build/; another builds with pip's
#     build isolation, which downloads scikit-build-core and pybind11.
# Dependencies are downloaded once into build/wheel-downloads: a later run finds them there and
# needs no network.
set -euo pipefail
PY=${1:?usage: wheelhouse.sh VENV_PYTHON LLAMA_WHEELS_DIR OUT_DIR [PYTHON...]}
LLAMA=${2:?LLAMA_WHEELS_DIR missing}
OUT=${3:?OUT_DIR missing}
shift 3
PYTHONS=("$@")
[ ${#PYTHONS[@]} -gt 0 ] || PYTHONS=("$PY")
REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=$REPO/build/wheel-downloads
pip() { "$1" -m pip --disable-pip-version-check --no-input "${@:2}"; }

llama=$(compgen -G "$LLAMA/llama_cpp_python-*.whl") || { echo "wheelhouse: no llama-cpp-python wheel in $LLAMA" >&2; exit 2; }
rm -rf "$OUT"
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
cp "$llama" "$OUT"/

# The .venv's versions of everything the daemon needs: exact for the .venv's Python, upper
# bounds for the others (direct references, such as the project itself, cannot be constraints).
pip "$PY" freeze --exclude lookahead-lsp --exclude llama-cpp-python | grep -E '^[A-Za-z0-9_.-]+==' > "$CACHE/constraints.txt"
sed 's/==/<=/' "$CACHE/constraints.txt" > "$CACHE/constraints-upto.txt"
venv=$("$PY" -c 'import sys; print(sys.prefix)')

for python in "${PYTHONS[@]}"; do
  tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  if "$python" -c 'import scikit_build_core, pybind11' 2> /dev/null; then isolation=--no-build-isolation; else isolation=; fi
  pip "$python" wheel --quiet --no-deps $isolation "$REPO" -w "$OUT"
  wheel=$(compgen -G "$OUT/lookahead_lsp-*-$tag-$tag-*.whl") || { echo "wheelhouse: no $tag wheel of the daemon was built" >&2; exit 1; }
  constraints=$CACHE/constraints-upto.txt
  [ "$("$python" -c 'import sys; print(sys.prefix)')" = "$venv" ] && constraints=$CACHE/constraints.txt
  fetch=(download --quiet --only-binary=:all: -c "$constraints" "$wheel" "$llama")
  pip "$python" "${fetch[@]}" --no-index --find-links "$CACHE" -d "$OUT" 2> /dev/null || {
    pip "$python" "${fetch[@]}" -d "$CACHE"
    rm -f "$CACHE"/lookahead_lsp-*.whl "$CACHE"/llama_cpp_python-*.whl # copies of the two given
    pip "$python" "${fetch[@]}" --no-index --find-links "$CACHE" -d "$OUT"
  }
done
echo "wheelhouse: $(ls "$OUT" | wc -l) wheels ($(du -sh "$OUT" | cut -f1)) in $OUT, the daemon's for: $(ls "$OUT"/lookahead_lsp-*.whl | sed -E 's/.*-(cp[0-9]+)-cp.*/\1/' | tr '\n' ' ')"
