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

# Until the completion engine lands, the demo shows the lookup core on real code: a static cache
# of the standard library's asyncio package, then a replay of http/client.py drafted from it.
demo: install
	@stdlib=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])'); \
	mkdir -p build/demo && \
	$(VENV)/bin/lookahead-lsp build-cache "$$stdlib/asyncio" -o build/demo/asyncio.cache && \
	$(VENV)/bin/lookahead-lsp inspect-cache build/demo/asyncio.cache --verify && \
	$(VENV)/bin/lookahead-lsp lookup-stats --file "$$stdlib/http/client.py" --ctx-size 2048 \
		--static-cache build/demo/asyncio.cache

bench: install
	$(PY) bench/lookup_bench.py

clean:
	rm -rf build $(VENV)
