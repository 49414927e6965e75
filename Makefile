# `make test` and `make demo` work on a fresh machine: they create .venv and install what is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# llama-cpp-python has no wheels: pip compiles llama.cpp once (~8 min) and keeps the wheel in its cache.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install test demo bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(PY)
	$(PIP) install --quiet scikit-build-core 'pybind11>=3,<4'
	$(PIP) install --quiet --no-build-isolation '.[test]'

test: install
	$(PY) -m pytest -q

demo: install
	$(VENV)/bin/lookahead-lsp demo

bench: install
	$(PY) bench/lookup_bench.py

clean:
	rm -rf build $(VENV)
