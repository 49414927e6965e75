# `make test` and `make demo` work on a fresh machine: they create .venv and install what is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

# llama-cpp-python has no wheels: llama.cpp is compiled from source once (~8 min) into a wheel
# kept outside the checkout. Its default build (-march=native) uses every instruction set the
# CPU reports, and some virtual machines report AMX without letting processes use it: the first
# matrix product dies of SIGILL. So on x86-64 the wheel is built for AVX2 (plus AVX-512 where
# the CPU has it) with native tuning off; elsewhere llama.cpp's defaults stand.
LLAMA_CPP_VERSION := 0.3.36
ARCH := $(shell uname -m)
HAS_AVX512 := $(shell grep -qw avx512bw /proc/cpuinfo 2>/dev/null && grep -qw avx512vl /proc/cpuinfo && echo yes)
LLAMA_FLAVOUR := $(if $(filter x86_64,$(ARCH)),$(if $(HAS_AVX512),avx512,avx2),default)
LLAMA_CMAKE_ARGS_avx2 := -DGGML_NATIVE=OFF
LLAMA_CMAKE_ARGS_avx512 := -DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON
LLAMA_CMAKE_ARGS_default :=
# `make install GPU=cuda` (NVIDIA, needs the CUDA toolkit's nvcc) or `GPU=metal` (Apple
# silicon) builds llama.cpp with that backend too, into a wheel of its own next to the CPU one;
# the model then runs on the GPU (the extension's gpuLayers setting, all layers by default).
GPU ?=
LLAMA_GPU_ARGS_cuda := -DGGML_CUDA=on
LLAMA_GPU_ARGS_metal := -DGGML_METAL=on
ifneq ($(filter-out cuda metal,$(GPU)),)
$(error GPU must be cuda or metal (or unset for the CPU build), not "$(GPU)")
endif
LLAMA_BUILD := $(LLAMA_FLAVOUR)$(if $(GPU),-$(GPU))
LLAMA_CACHE := $(HOME)/.cache/lookahead-lsp/llama-cpp-python-$(LLAMA_CPP_VERSION)
LLAMA_WHEELS := $(LLAMA_CACHE)-$(LLAMA_BUILD)
LLAMA_STAMP := $(VENV)/.llama-cpp-python-$(LLAMA_CPP_VERSION)-$(LLAMA_BUILD)

# The VS Code extension's end-to-end test runs a real VS Code: code-server from the npm registry,
# built here once (its own install scripts would download from GitHub) and kept outside the
# checkout like the llama.cpp wheel.
CODE_SERVER_VERSION := 4.100.3
CODE_SERVER := $(HOME)/.cache/lookahead-lsp/code-server-$(CODE_SERVER_VERSION)
CLIENT := vscode-client

# The extension with its daemon, for this machine's platform as VS Code names it (linux-x64,
# linux-arm64, darwin-arm64, darwin-x64): the daemon's wheel for each Python of VSIX_PYTHONS, a
# portable llama-cpp-python wheel (built once with -DGGML_NATIVE=OFF: on x86-64 the avx2 build,
# AVX2/FMA/F16C) and the wheels of their dependencies. VSIX_PYTHONS: this checkout's Python by
# default, which keeps `make test` short; a release names every Python the daemon supports.
VSCE_ARCH_x86_64 := x64
VSCE_ARCH_aarch64 := arm64
VSCE_ARCH_arm64 := arm64
VSIX_TARGET := $(shell uname -s | tr A-Z a-z)-$(or $(VSCE_ARCH_$(ARCH)),$(ARCH))
VSIX_LLAMA := $(LLAMA_CACHE)-$(if $(filter x86_64,$(ARCH)),avx2,portable)
LLAMA_CMAKE_ARGS_portable := -DGGML_NATIVE=OFF
VSIX_PYTHONS ?= $(PY)
PLATFORM_VSIX := $(CLIENT)/lookahead-lsp-$(VSIX_TARGET).vsix

.PHONY: install prerequisites dist test typecheck test-tools test-packages sanitize demo bench clean vsix vsix-$(VSIX_TARGET) test-vscode e2e

# What the build needs and make does not install: a C++17 compiler, CMake and Python's venv
# module (a package of its own on Debian and Ubuntu). One line each for what is missing.
prerequisites:
	@missing=; \
	command -v $(CXX) >/dev/null 2>&1 || { missing=1; echo "make: no C++ compiler ($(CXX)): apt-get install g++ (Debian/Ubuntu) or xcode-select --install (macOS)" >&2; }; \
	command -v cmake >/dev/null 2>&1 || { missing=1; echo "make: no cmake: apt-get install cmake (Debian/Ubuntu) or brew install cmake (macOS)" >&2; }; \
	$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || { missing=1; echo "make: $(PYTHON) cannot create a virtual environment: apt-get install python3-venv (Debian/Ubuntu) or brew install python (macOS)" >&2; }; \
	test -z "$$missing"

$(PY): | prerequisites
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# One folder per build, named FLAVOUR or FLAVOUR-GPU (avx512, avx2-cuda...), each by this recipe:
# `make install`'s for this machine, and the .vsix's portable avx2 one.
$(LLAMA_CACHE)-%/.built: | $(PY)
	mkdir -p $(@D)
	CMAKE_ARGS="$(strip $(LLAMA_CMAKE_ARGS_$(word 1,$(subst -, ,$*))) $(LLAMA_GPU_ARGS_$(word 2,$(subst -, ,$*))))" $(PIP) wheel --quiet --no-cache-dir --no-deps llama-cpp-python==$(LLAMA_CPP_VERSION) -w $(@D)
	touch $@

# The first install brings its dependencies; the second replaces a build of the same version
# that pip may have installed from its own cache, or another flavour's (one stamp at a time, so
# that going back to a flavour installs it again).
$(LLAMA_STAMP): $(LLAMA_WHEELS)/.built
	$(PIP) install --quiet $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(PIP) install --quiet --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	rm -f $(VENV)/.llama-cpp-python-*
	touch $@

install: prerequisites $(PY) $(LLAMA_STAMP)
	$(PIP) install --quiet scikit-build-core 'pybind11>=3,<4'
	$(PIP) install --quiet --no-build-isolation '.[test]'

# The sdist and a wheel built from it (which proves the sdist complete) in dist/, for
# `pip install` or `pipx install`. The wheel's native core is built for this machine's Python,
# operating system and CPU family. Beside them the portable llama-cpp-python wheel (the .vsix's),
# which pip takes with --find-links dist instead of compiling llama.cpp with -march=native.
dist: install $(VSIX_LLAMA)/.built
	$(PIP) install --quiet 'build>=1'
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	cp $(VSIX_LLAMA)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl dist/

# Tools of the editor tests, installed when missing: Neovim and Emacs with eglot and lsp-mode
# (the other editors of the LSP tests; an elpa-* package is known by its emacsen-common install
# script), Chromium (drives VS Code in the end-to-end test) and what code-server's native modules
# are built with.
TEST_PACKAGES := nvim:neovim emacs:emacs-nox \
	/usr/lib/emacsen-common/packages/install/elpa-eglot:elpa-eglot \
	/usr/lib/emacsen-common/packages/install/elpa-lsp-mode:elpa-lsp-mode \
	chromium:chromium rg:ripgrep ip:iproute2 curl:curl g++:build-essential \
	pkg-config:pkg-config krb5-config:libkrb5-dev
test-tools: test-packages $(CODE_SERVER)/.built

test-packages:
	@missing=; for p in $(TEST_PACKAGES); do \
		command -v $${p%%:*} >/dev/null 2>&1 || missing="$$missing $${p#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(CODE_SERVER)/.built: | test-packages
	$(CLIENT)/e2e/install-code-server.sh $(CODE_SERVER) $(CODE_SERVER_VERSION)
	touch $@

$(CLIENT)/node_modules/.installed: $(CLIENT)/package-lock.json
	cd $(CLIENT) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

# The extension, type-checked, bundled and packaged into vscode-client/lookahead-lsp.vsix: for
# every platform, without a daemon (it installs one from the package index).
vsix: $(CLIENT)/node_modules/.installed
	rm -rf $(CLIENT)/wheelhouse
	cd $(CLIENT) && npm run -s typecheck && npm run -s package

# The extension with its daemon for this platform: vscode-client/lookahead-lsp-linux-x64.vsix on
# Linux x86-64 (see VSIX_TARGET), its wheels in the package's wheelhouse/ (vscode-client/
# wheelhouse.sh; the folder is removed again once packaged, so that `make vsix` never carries it).
# A release: make vsix-linux-x64 VSIX_PYTHONS="python3.10 python3.11 python3.12 python3.13"
vsix-$(VSIX_TARGET): install $(VSIX_LLAMA)/.built $(CLIENT)/node_modules/.installed
	$(CLIENT)/wheelhouse.sh $(PY) $(VSIX_LLAMA) $(CLIENT)/wheelhouse $(VSIX_PYTHONS)
	cd $(CLIENT) && npm run -s typecheck && npm run -s package -- --target $(VSIX_TARGET) -o $(notdir $(PLATFORM_VSIX)); \
		status=$$?; rm -rf wheelhouse; exit $$status
	@ls -l $(PLATFORM_VSIX)

# The extension's own logic, under Node's test runner.
test-vscode: $(CLIENT)/node_modules/.installed
	cd $(CLIENT) && LOOKAHEAD_TEST_PYTHON=$(abspath $(PY)) npm test --silent

# The platform extension in a real VS Code with the real daemon and model, then with no daemon:
# the extension installs one itself from the wheels it carries, with no compiler on PATH and no
# network (see vscode-client/e2e/run.sh); screenshots, logs and result.json go to build/e2e and
# build/e2e/install.
e2e: install test-tools vsix-$(VSIX_TARGET)
	$(CLIENT)/e2e/run.sh $(CODE_SERVER) $(PLATFORM_VSIX) $(VENV)/bin/lookahead-lsp build/e2e

# mypy --strict (pyproject's [tool.mypy]) over the package, its tests and the benchmarks, in one
# run, so that the tests are checked against this checkout's sources. Needs `make install` once.
typecheck:
	$(PY) -m mypy daemon/lookahead_lsp tests bench

test: install test-tools
	$(MAKE) --no-print-directory typecheck
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory test-vscode e2e sanitize

# The native core's tests once more, against a build with AddressSanitizer and UBSan: the cache
# loaders promise never to read outside a mapping, whatever the file holds. Python itself is not
# built with ASan, so its runtime is preloaded (with libstdc++, whose throw it intercepts), and
# Python's allocations still live at exit are not leaks of ours. Python runs without site (-S):
# the editable install's import hook would otherwise load the regular build instead of this one
# (it did, until issue 20); site-packages comes back through PYTHONPATH, after the ASan build.
# Then a short run of the static cache fuzzer (`make fuzz`).
SANITIZE_TESTS := tests/lookup
SANITIZE_FUZZ_RUNS := 200000
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
		PYTHONPATH=build/sanitize/pkg:$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
		$(PY) -S -c 'import sys, lookahead_lsp._lookup as m; sys.exit(0 if "build/sanitize/" in m.__file__ else "not the ASan build: " + m.__file__)'
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
		ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		PYTHONPATH=build/sanitize/pkg:$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
		$(PY) -S -m pytest -q -p no:cacheprovider $(SANITIZE_TESTS)
	$(MAKE) --no-print-directory fuzz FUZZ_RUNS=$(SANITIZE_FUZZ_RUNS)

# The static cache format's fuzzer (native/fuzz/static_cache_fuzz.cpp) under AddressSanitizer and
# UBSan: structured mutations of valid caches (header fields, bucket bounds, record keys and
# spans, followers, counts with a matching layout; most behind a recomputed checksum) and raw
# byte edits, each input in a guarded buffer. `make fuzz [FUZZ_RUNS=N] [FUZZ_SEED=S]` builds it
# with $(CXX) and runs it; `make fuzz-libfuzzer` (clang: apt-get install clang) runs the same
# target coverage-guided under libFuzzer, its corpus kept in build/fuzz/corpus.
# The folder table's fuzzer (native/fuzz/folder_table_fuzz.cpp) runs after it, the same way:
# its seed tables checked against NgramCache first, then mutations of them (header fields,
# bucket offsets, record heads and followers, records swapped, the index rebuilt, the stream
# grown or cut) through find(), the workspace layers and drafting. An input costs it several
# times what one costs the static fuzzer (a checksum of a larger file, three small caches and
# ten drafts), so it takes FUZZ_RUNS / FOLDER_FUZZ_DIVISOR of them; `make fuzz-folder-libfuzzer`
# is its libFuzzer run, corpus in build/fuzz/folder_corpus.
FUZZ_RUNS ?= 1000000
FUZZ_SEED ?= 1
FUZZ_SOURCES := native/fuzz/static_cache_fuzz.cpp $(addprefix native/,static_cache.cpp static_cache_check.cpp static_cache_store.cpp \
	file_bytes.cpp checksum.cpp static_cache_builder.cpp atomic_file.cpp write_buffer.cpp ngram_cache.cpp drafter.cpp \
	folder_table.cpp workspace_layers.cpp)
FUZZ_FLAGS := -std=c++17 -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=all -pthread -Inative
FOLDER_FUZZ_DIVISOR ?= 4
FOLDER_FUZZ_SOURCES := native/fuzz/folder_table_fuzz.cpp $(addprefix native/,folder_table.cpp \
	folder_table_builder.cpp page_release.cpp scratch_file.cpp workspace_layers.cpp file_bytes.cpp checksum.cpp atomic_file.cpp write_buffer.cpp ngram_cache.cpp \
	drafter.cpp static_cache.cpp static_cache_check.cpp static_cache_store.cpp)
.PHONY: fuzz fuzz-libfuzzer fuzz-folder-libfuzzer
build/fuzz/static_cache_fuzz: $(FUZZ_SOURCES) $(wildcard native/*.h) $(wildcard native/fuzz/*.h)
	mkdir -p build/fuzz
	$(CXX) $(FUZZ_FLAGS) -fsanitize=address,undefined $(FUZZ_SOURCES) -o $@
build/fuzz/folder_table_fuzz: $(FOLDER_FUZZ_SOURCES) $(wildcard native/*.h) $(wildcard native/fuzz/*.h)
	mkdir -p build/fuzz
	$(CXX) $(FUZZ_FLAGS) -fsanitize=address,undefined $(FOLDER_FUZZ_SOURCES) -o $@
fuzz: build/fuzz/static_cache_fuzz build/fuzz/folder_table_fuzz
	build/fuzz/static_cache_fuzz --runs $(FUZZ_RUNS) --seed $(FUZZ_SEED)
	build/fuzz/folder_table_fuzz --runs $$(( $(FUZZ_RUNS) / $(FOLDER_FUZZ_DIVISOR) )) --seed $(FUZZ_SEED)
build/fuzz/static_cache_libfuzzer: $(FUZZ_SOURCES) $(wildcard native/*.h) $(wildcard native/fuzz/*.h)
	mkdir -p build/fuzz
	clang++ $(FUZZ_FLAGS) -DLOOKUP_LIBFUZZER -fsanitize=fuzzer,address,undefined $(FUZZ_SOURCES) -o $@
fuzz-libfuzzer: build/fuzz/static_cache_libfuzzer
	mkdir -p build/fuzz/corpus
	build/fuzz/static_cache_libfuzzer -runs=$(FUZZ_RUNS) -seed=$(FUZZ_SEED) -max_len=65536 -print_final_stats=1 build/fuzz/corpus
build/fuzz/folder_table_libfuzzer: $(FOLDER_FUZZ_SOURCES) $(wildcard native/*.h) $(wildcard native/fuzz/*.h)
	mkdir -p build/fuzz
	clang++ $(FUZZ_FLAGS) -DLOOKUP_LIBFUZZER -fsanitize=fuzzer,address,undefined $(FOLDER_FUZZ_SOURCES) -o $@
fuzz-folder-libfuzzer: build/fuzz/folder_table_libfuzzer
	mkdir -p build/fuzz/folder_corpus
	build/fuzz/folder_table_libfuzzer -runs=$(FUZZ_RUNS) -seed=$(FUZZ_SEED) -max_len=131072 -print_final_stats=1 build/fuzz/folder_corpus

# One real completion with the default model: the body of a method in a small sample project,
# drafted from the project's other file.
demo: install
	$(VENV)/bin/lookahead-lsp complete examples/sample-project/shop/orders.py:18:9 \
		--workspace examples/sample-project

bench: install
	$(PY) bench/lookup_bench.py

clean:
	rm -rf build $(VENV)
