# `make test` and `make demo` work on a fresh machine: they create .venv and install what is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# llama-cpp-python has no wheels: pip compiles llama.cpp once (~8 min) and keeps the wheel in its cache.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: install test sanitize demo bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

install: $(PY)
	$(PIP) install --quiet scikit-build-core 'pybind11>=3,<4'
	$(PIP) install --quiet --no-build-isolation '.[test]'

test: install
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory sanitize

# The native core's tests once more, against a build with AddressSanitizer and UBSan: the cache
# loaders promise never to read outside a mapping, whatever the file holds. Python itself is not
# built with ASan, so its runtime is preloaded (with libstdc++, whose throw it intercepts), and
# Python's allocations still live at exit are not leaks of ours.
SANITIZE_TESTS := tests/test_ngram_cache.py tests/test_static_cache.py tests/test_drafting.py tests/test_replay.py
sanitize: install
	cmake -S . -B build/sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOKUP_SANITIZE=ON \
		-DLOOKUP_PYTHON_MODULE=ON -DPython_EXECUTABLE=$(abspath $(PY)) \
		-Dpybind11_DIR=$$($(PY) -m pybind11 --cmakedir) > /dev/null
	cmake --build build/sanitize --target _lookup > /dev/null
	rm -rf build/sanitize/pkg && mkdir -p build/sanitize/pkg
	cp -r "$$($(PY) -c 'import lookahead_lsp, os; print(os.path.dirname(lookahead_lsp.__file__))')" build/sanitize/pkg/
	cp build/sanitize/_lookup*.so build/sanitize/pkg/lookahead_lsp/
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
		ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		PYTHONPATH=build/sanitize/pkg $(PY) -m pytest -q -p no:cacheprovider $(SANITIZE_TESTS)

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
