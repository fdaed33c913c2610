# OpenReg: `make test` and `make demo` do everything from a fresh Debian machine.
# See README.md. Build trees live under build/ (release, asan, tsan).

JOBS ?= $(shell nproc)
PYTHON := $(CURDIR)/.venv/bin/python
RUFF := $(CURDIR)/.venv/bin/ruff
CMAKE_COMMON := -DOPENREG_BUILD_TESTS=ON
SOURCES = $(shell find runtime bench csrc torch_openreg/csrc -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.c')

# Sanitizer runs: shorter stress loops, and no 1 s sleep at exit per TSan process.
SANITIZER_ENV := OPENREG_STRESS_SCALE=4 TSAN_OPTIONS=atexit_sleep_ms=0:second_deadlock_stack=1 \
                 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

.PHONY: all setup build test test-abi test-runtime test-python test-wheel sanitize fuzz check-docs check-format check-lint format demo tour bench conformance clean test-ipc bench-profiler bench-graphs bench-compile conformance-compile test-compile-long test-distributed bench-distributed conformance-pytorch test-ecosystem

all: build

setup:
	@scripts/setup.sh

# Configure once per tree, then let CMake's own dependency tracking decide what to rebuild.
# The release tree builds everything, the PyTorch backend included, against the venv's torch.
build/release/CMakeCache.txt:
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release $(CMAKE_COMMON) -DOPENREG_BUILD_TORCH=ON \
	  -DPython3_EXECUTABLE=$(PYTHON)
build/asan/CMakeCache.txt:
	cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DOPENREG_BUILD_BENCH=OFF \
	  -DOPENREG_SANITIZE=address,undefined $(CMAKE_COMMON)
build/tsan/CMakeCache.txt:
	cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DOPENREG_BUILD_BENCH=OFF \
	  -DOPENREG_SANITIZE=thread $(CMAKE_COMMON)

build: setup build/release/CMakeCache.txt
	cmake --build build/release -j $(JOBS)
	@$(MAKE) --no-print-directory .venv/.openreg-installed

# An editable install into the venv: the package (and its entry point for autoload) points at
# torch_openreg/ in this tree, where the build writes the shared objects; rebuilding needs no
# reinstall. setup.py reuses build/release instead of configuring a tree of its own.
.venv/.openreg-installed: pyproject.toml setup.py
	OPENREG_CMAKE_BUILD_DIR=$(CURDIR)/build/release $(PYTHON) -m pip install -q \
	  --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

test-runtime: build
	cd build/release && ctest -j $(JOBS) --output-on-failure

sanitize: setup build/asan/CMakeCache.txt build/tsan/CMakeCache.txt
	cmake --build build/asan -j $(JOBS)
	cd build/asan && $(SANITIZER_ENV) ctest -j $(JOBS) --output-on-failure
	cmake --build build/tsan -j $(JOBS)
	cd build/tsan && $(SANITIZER_ENV) ctest -j $(JOBS) --output-on-failure

# The runtime's fuzzer for FUZZ_SECONDS (default 600) under ASan and UBSan; `make test` runs it for
# 20 s in each tree. FUZZ_SEED replays a failing seed (docs/runtime.md, "The fuzzer").
FUZZ_SECONDS ?= 600
fuzz: setup build/asan/CMakeCache.txt
	cmake --build build/asan -j $(JOBS) --target runtime_fuzz
	$(SANITIZER_ENV) build/asan/runtime/runtime_fuzz --seconds $(FUZZ_SECONDS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

test-python: build
	$(PYTHON) -m pytest -q tests

# The wheel (tests/test_wheel.py): test-python builds it and checks its tag, requirement and
# contents; this also installs it into a fresh environment and runs the smoke suite
# (tests/installed_smoke.py) there, from a directory outside the checkout, with the venv's torch
# linked in (WHEEL_TORCH=link, about a minute; `make test` runs it) or installed there by pip as a
# user would (WHEEL_TORCH=pip, minutes).
WHEEL_TORCH ?= link
test-wheel: build
	OPENREG_WHEEL_TEST=$(WHEEL_TORCH) $(PYTHON) -m pytest -q tests/test_wheel.py

# Sharing device memory between processes, the longer cases (docs/ipc.md): several spawned
# interpreters, about a minute on 2 cores. `make test` runs tests/test_ipc.py, one spawned child.
test-ipc: build
	$(PYTHON) -m pytest -q tests/ipc_long.py

check-docs:
	python3 tools/check_doc_markers.py

check-format: setup
	clang-format --dry-run --Werror $(SOURCES)

format: setup
	clang-format -i $(SOURCES)

# Python lint: the rules and their exceptions are in pyproject.toml ([tool.ruff]).
check-lint: setup
	$(RUFF) check .

test: check-format check-lint check-docs test-runtime sanitize test-python test-wheel

# Another torch release (docs/versions.md): TORCH=2.14.1 (on this machine's disk) or 2.15.0 (from
# PyPI, about 4 GB): its own venv and build tree, the package installed with pip as a user does,
# then the whole Python suite and the wheel's smoke suite against it (scripts/test_torch.sh).
.PHONY: test-torch
test-torch:
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=X.Y.Z (e.g. 2.14.1, 2.15.0)" >&2; exit 2; }
	scripts/test_torch.sh $(TORCH)

# The main job: a model trained on openreg, compared with the CPU (examples/train_classifier.py).
demo: build
	$(PYTHON) examples/train_classifier.py
	$(PYTHON) examples/memory_history.py build/demo

# The OpInfo conformance sweep: every operator PyTorch tests, on openreg against the CPU, every
# dtype, forward and backward; writes conformance/coverage.{json,md} (docs/conformance.md).
conformance: build
	$(PYTHON) tools/conformance.py --jobs $(JOBS) --out conformance

# PyTorch's own device-generic test files, each run on the CPU and on openreg in fresh processes,
# compared test by test; writes conformance/pytorch-suite.{json,md} (docs/conformance.md).
# PYTORCH_TESTS names a folder of files read from pytorch/pytorch, kept outside this repository.
# TORCH=X.Y.Z runs them against another release instead: its venv and build tree of
# `make test-torch` (the package reinstalled from this tree first, as that target installs it),
# writing conformance/pytorch-suite-X.Y.{json,md} beside the default release's report.
# PYTORCH_SUITE_ARGS goes to the runner, e.g. "--files test_indexing.py --update" to re-run a file.
conformance-pytorch: $(if $(TORCH),,build)
	@test -n "$(PYTORCH_TESTS)" || { echo "make conformance-pytorch: set PYTORCH_TESTS to a folder of PyTorch test files (docs/conformance.md)"; exit 2; }
ifeq ($(TORCH),)
	$(PYTHON) tools/pytorch_suite.py --tests $(PYTORCH_TESTS) --jobs $(JOBS) --out conformance $(PYTORCH_SUITE_ARGS)
else
	scripts/test_torch.sh $(TORCH) --install-only
	PYTHONSAFEPATH=1 .venv-torch-$(TORCH)/bin/python tools/pytorch_suite.py --tests $(PYTORCH_TESTS) \
	  --jobs $(JOBS) --out conformance --name pytorch-suite-$(word 1,$(subst ., ,$(TORCH))).$(word 2,$(subst ., ,$(TORCH))) \
	  $(PYTORCH_SUITE_ARGS)
endif

# The runtime on its own, without PyTorch.
tour: build
	build/release/runtime/runtime_tour

# The bench's own Python packages (requirements-bench.txt: transformers, for bench/hf_models.py),
# not needed by `make test`. constraints.txt pins torch, so pip fails rather than upgrade it.
.venv/.bench-requirements-installed: requirements-bench.txt constraints.txt
	$(PYTHON) -m pip install -q --disable-pip-version-check -c constraints.txt -r requirements-bench.txt
	touch $@

bench: build
	@$(MAKE) --no-print-directory .venv/.bench-requirements-installed
	@mkdir -p bench/results
	build/release/bench/runtime_bench bench/results/runtime.json
	build/release/bench/allocator_bench bench/results/allocator.json
	$(PYTHON) bench/engine_bench.py bench/results/engine.json

# What the profiler costs per operator call, off and on, openreg against the CPU (docs/profiling.md).
bench-profiler: build
	@mkdir -p bench/results
	$(PYTHON) bench/profiler_bench.py --json bench/results/profiler.json
# What the debug modes and memory history cost when on (docs/debugging.md).
# Fragmentation under variable sequence lengths, fixed against expandable segments (docs/memory.md).
.PHONY: bench-memory
bench-memory: build
	@mkdir -p bench/results
	$(PYTHON) bench/memory_bench.py --json bench/results/memory.json

.PHONY: bench-debug
bench-debug: build
	@mkdir -p bench/results
	$(PYTHON) bench/debug_modes_bench.py bench/results/debug_modes.json

# Graph replay against eager openreg and the CPU, with a transformers GPT-2 forward (docs/graphs.md).
bench-graphs: build
	@$(MAKE) --no-print-directory .venv/.bench-requirements-installed
	@mkdir -p bench/results
	$(PYTHON) bench/graph_bench.py --gpt2 bench/results/graphs.json

# The compile sweep: every OpInfo, forward, float32/bfloat16/int64, compiled on openreg against
# eager CPU where CPU Inductor passes; COMPILE_SAMPLES samples per (op, dtype) (0: all). Writes
# conformance/compile-coverage.{json,md} (docs/compile.md).
COMPILE_SAMPLES ?= 3
conformance-compile: build
	$(PYTHON) tools/conformance.py --compile --max-samples $(COMPILE_SAMPLES) --jobs $(JOBS) --out conformance

# torch.compile's long cases (tests/test_compile.py, OPENREG_COMPILE_LONG): compiled training of
# the CNN, the transformer LM and GPT-2 (transformers from requirements-bench.txt) against the CPU.
test-compile-long: build
	@$(MAKE) --no-print-directory .venv/.bench-requirements-installed
	OPENREG_COMPILE_LONG=1 $(PYTHON) -m pytest -q tests/test_compile.py -k long

# torch.compile on openreg against the CPU (bench/compile_bench.py, docs/compile.md): compiled
# training steps, compile time, compiled against eager openreg, a warm second process.
bench-compile: build
	@$(MAKE) --no-print-directory .venv/.bench-requirements-installed
	@mkdir -p bench/results
	$(PYTHON) bench/compile_bench.py --json bench/results/compile.json

clean:
	rm -rf build

# The C ABI (docs/runtime.md, "The C ABI"): libopenreg built by clang with C++20 and libc++, and its
# tests run on that build; the PyTorch layer built by GCC with libstdc++ against that library
# (OPENREG_RUNTIME_LIBRARY), into a copy of the package under build/abi-torch/package, so the
# release build's shared objects stay as they are; then the Python suite on that package, except
# tests/test_wheel.py, which packages the source tree's shared objects (the release build).
# scripts/check_abi.py asserts which libraries the process has loaded.
ABI_PACKAGE := $(CURDIR)/build/abi-torch/package
ABI_RUNTIME_LIB := $(CURDIR)/build/abi-runtime/runtime/libopenreg.so
build/abi-runtime/CMakeCache.txt:
	cmake -S . -B build/abi-runtime -DCMAKE_BUILD_TYPE=Release -DOPENREG_BUILD_BENCH=OFF $(CMAKE_COMMON) \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
	  -DCMAKE_EXE_LINKER_FLAGS=-stdlib=libc++ -DCMAKE_SHARED_LINKER_FLAGS=-stdlib=libc++
build/abi-torch/CMakeCache.txt:
	cmake -S . -B build/abi-torch -DCMAKE_BUILD_TYPE=Release -DOPENREG_BUILD_TESTS=OFF \
	  -DOPENREG_BUILD_BENCH=OFF -DOPENREG_BUILD_TORCH=ON -DOPENREG_RUNTIME_LIBRARY=$(ABI_RUNTIME_LIB) \
	  -DOPENREG_PACKAGE_DIR=$(ABI_PACKAGE)/torch_openreg -DPython3_EXECUTABLE=$(PYTHON)

test-abi:
	@scripts/setup.sh abi
	@$(MAKE) --no-print-directory build/abi-runtime/CMakeCache.txt build/abi-torch/CMakeCache.txt
	cmake --build build/abi-runtime -j $(JOBS)
	cd build/abi-runtime && ctest -j $(JOBS) --output-on-failure
	@mkdir -p $(ABI_PACKAGE)
	tar -c --exclude='*.so' --exclude=__pycache__ --exclude=_build_info.py torch_openreg | tar -x -C $(ABI_PACKAGE)
	cmake --build build/abi-torch -j $(JOBS)
	cp $(ABI_RUNTIME_LIB) $(ABI_PACKAGE)/torch_openreg/lib/libopenreg.so
	PYTHONPATH=$(ABI_PACKAGE) $(PYTHON) scripts/check_abi.py $(ABI_PACKAGE)/torch_openreg
	PYTHONPATH=$(ABI_PACKAGE) $(PYTHON) -m pytest -q tests --ignore=tests/test_wheel.py

# torch.distributed on openreg (docs/distributed.md): the 2-rank checks of make test, then FSDP2,
# DTensor, checkpoints, faults and torchrun launches (tests/distributed/dist_*.py, named so that
# make test does not collect them; a few minutes).
test-distributed: build
	$(PYTHON) -m pytest -q tests/test_distributed.py tests/distributed/dist_*.py

# occl against Gloo on CPU tensors, 2 ranks: all-reduce bus bandwidth 1 KiB..256 MiB and a DDP
# step (bench/distributed_bench.py; JSON in bench/results/distributed.json).
bench-distributed: build
	@mkdir -p bench/results
	$(PYTHON) bench/distributed_bench.py bench/results/distributed.json

# The libraries people train with (Lightning, transformers, accelerate, DeepSpeed; docs/ecosystem.md), each
# run on openreg against the same run on the CPU (tests/ecosystem/eco_*.py, named so that `make test`
# does not collect them). Their own venv, .venv-ecosystem/, made here: torch pinned by
# constraints.txt, the package installed in editable mode from this tree's build/release.
ECO_VENV := $(CURDIR)/.venv-ecosystem
$(ECO_VENV)/.requirements-installed: requirements-ecosystem.txt requirements-ecosystem-sdist.txt \
    requirements-dev.txt constraints.txt
	[ -x $(ECO_VENV)/bin/python ] || python3 -m venv $(ECO_VENV)
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(ECO_VENV)/bin/python -m pip install -q \
	  --disable-pip-version-check torch==2.13.0 -r requirements-dev.txt -r requirements-ecosystem.txt
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(ECO_VENV)/bin/python -m pip install -q \
	  --disable-pip-version-check --no-build-isolation -r requirements-ecosystem-sdist.txt
	touch $@
$(ECO_VENV)/.openreg-installed: $(ECO_VENV)/.requirements-installed pyproject.toml setup.py
	OPENREG_CMAKE_BUILD_DIR=$(CURDIR)/build/release PIP_CONSTRAINT=$(CURDIR)/constraints.txt \
	  $(ECO_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $@

test-ecosystem: build
	@$(MAKE) --no-print-directory $(ECO_VENV)/.openreg-installed
	$(ECO_VENV)/bin/python -m pytest -q tests/ecosystem/eco_*.py

# The same libraries' training steps, openreg against the CPU in one process (bench/ecosystem_bench.py).
.PHONY: bench-ecosystem
bench-ecosystem: build
	@$(MAKE) --no-print-directory $(ECO_VENV)/.openreg-installed
	@mkdir -p bench/results
	$(ECO_VENV)/bin/python bench/ecosystem_bench.py bench/results/ecosystem.json

# vLLM on openreg (docs/vllm.md): the platform plugin torch_openreg.vllm, offline inference and
# `vllm serve` on openreg against Hugging Face's greedy generate on the CPU (tests/vllm/vllm_*.py,
# named so that `make test` does not collect them). Its own venv, .venv-vllm/ (scripts/setup.sh with
# torch 2.14.0, the release vLLM 0.33.0 pins, then requirements-vllm.txt: about 10 GB with vLLM's
# CUDA dependencies), and build tree, build/python-vllm; the package installed with pip as a user
# does, so that vLLM finds the platform through its entry point.
VLLM_VENV := .venv-vllm
VLLM_TORCH := 2.14.0
$(VLLM_VENV)/.vllm-installed: requirements-vllm.txt requirements-dev.txt
	OPENREG_SETUP_VENV=$(VLLM_VENV) OPENREG_SETUP_TORCH=$(VLLM_TORCH) scripts/setup.sh
	PIP_CONSTRAINT=$(CURDIR)/$(VLLM_VENV)/constraints.txt $(VLLM_VENV)/bin/python -m pip install -q \
	  --disable-pip-version-check -r requirements-vllm.txt
	touch $@

.PHONY: test-vllm bench-vllm vllm-install
vllm-install: $(VLLM_VENV)/.vllm-installed
	OPENREG_CMAKE_BUILD_DIR=$(CURDIR)/build/python-vllm PIP_CONSTRAINT=$(CURDIR)/$(VLLM_VENV)/constraints.txt \
	  $(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
	  --force-reinstall --no-deps .

test-vllm: vllm-install
	PYTHONSAFEPATH=1 $(VLLM_VENV)/bin/python -m pytest -q tests/vllm/vllm_*.py

# Tokens per second and time to first token, openreg against Hugging Face's generate on the CPU
# (bench/vllm_bench.py; JSON in bench/results/vllm.json).
bench-vllm: vllm-install
	@mkdir -p bench/results
	PYTHONSAFEPATH=1 $(VLLM_VENV)/bin/python bench/vllm_bench.py --json bench/results/vllm.json

# transformers' own model tests on openreg (docs/testing-libraries.md): each model's test file run on
# the CPU and on openreg in separate pytest processes, compared test by test
# (tests/libraries/transformers_suite.py, compare.py); the report goes to build/libraries/transformers/.
# Its own venv, .venv-libraries/ (torch pinned by constraints.txt, requirements-libraries.txt, the
# package installed in editable mode from build/release, as for .venv-ecosystem/). The tests come from
# the release's sdist (fetched from PyPI: tests/*_common.py, *_mixin.py) and from TRANSFORMERS_TESTS,
# a folder read from the transformers repository and kept outside this one (the model test files,
# tests/generation/, conftest.py). LIBRARY_MODELS names the tests/models/ folders to run.
LIB_VENV := $(CURDIR)/.venv-libraries
LIB_WORK := $(CURDIR)/build/libraries
TRANSFORMERS_RELEASE := 5.23.0
TRANSFORMERS_SDIST := $(LIB_WORK)/transformers-$(TRANSFORMERS_RELEASE).tar.gz
LIBRARY_MODELS ?= gpt2,bert,llama,t5,vit,whisper,mixtral
# A library's venv: $(1) its folder, $(2) its requirements file; torch 2.13.0 held by constraints.txt,
# then the package installed in editable mode from build/release.
define library_venv
$(1)/.requirements-installed: $(2) constraints.txt
	[ -x $(1)/bin/python ] || python3.11 -m venv $(1)
	echo '*' > $(1)/.gitignore
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(1)/bin/python -m pip install -q \
	  --disable-pip-version-check torch==2.13.0 -r $(2)
	touch $$@
$(1)/.openreg-installed: $(1)/.requirements-installed pyproject.toml setup.py
	OPENREG_CMAKE_BUILD_DIR=$(CURDIR)/build/release PIP_CONSTRAINT=$(CURDIR)/constraints.txt \
	  $(1)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $$@
endef
$(eval $(call library_venv,$(LIB_VENV),requirements-libraries.txt))
$(TRANSFORMERS_SDIST): $(LIB_VENV)/.requirements-installed
	@mkdir -p $(LIB_WORK)
	$(LIB_VENV)/bin/python -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
	  -d $(LIB_WORK) transformers==$(TRANSFORMERS_RELEASE)

.PHONY: test-libraries
test-libraries: build
	@test -d "$(TRANSFORMERS_TESTS)/tests/models" || { echo "make test-libraries: set TRANSFORMERS_TESTS to a folder holding transformers' conftest.py, tests/ and utils/test_module/ at one commit (docs/testing-libraries.md)" >&2; exit 2; }
	@$(MAKE) --no-print-directory $(LIB_VENV)/.openreg-installed $(TRANSFORMERS_SDIST)
	$(LIB_VENV)/bin/python tests/libraries/transformers_suite.py --sdist $(TRANSFORMERS_SDIST) \
	  --tests $(TRANSFORMERS_TESTS) --work $(LIB_WORK)/transformers --models $(LIBRARY_MODELS)

# diffusers' own tests on openreg, the same way (tests/libraries/diffusers_suite.py; the report goes to
# build/libraries/diffusers/), in the same venv, against the diffusers release requirements-libraries.txt
# pins. Neither its wheel nor its sdist has the tests: DIFFUSERS_TESTS names a folder holding tests/
# read from the diffusers repository at one commit, kept outside this one. DIFFUSERS_FILES names the
# test files by the suite's row names (or tests/...py paths).
DIFFUSERS_FILES ?= unet_2d_condition,dit_transformer2d,dit_pipeline,ddim_pipeline,ddpm_pipeline
.PHONY: test-libraries-diffusers
test-libraries-diffusers: build
	@test -f "$(DIFFUSERS_TESTS)/tests/testing_utils.py" || { echo "make test-libraries-diffusers: set DIFFUSERS_TESTS to a folder holding diffusers' tests/ at one commit (docs/testing-libraries.md)" >&2; exit 2; }
	@$(MAKE) --no-print-directory $(LIB_VENV)/.openreg-installed
	$(LIB_VENV)/bin/python tests/libraries/diffusers_suite.py --tests $(DIFFUSERS_TESTS) \
	  --work $(LIB_WORK)/diffusers --files $(DIFFUSERS_FILES)

# torchtitan's Llama 3 debug model on openreg against the same run on the CPU over Gloo
# (tests/libraries/torchtitan_suite.py, docs/torchtitan.md): FSDP2 on 2 ranks, FSDP2 with tensor
# parallelism on 4, a DCP checkpoint saved and resumed, and the same job across two network
# namespaces (needs root, for `ip netns`). Not part of `make test` (minutes on 2
# cores). Its own venv, .venv-torchtitan/ (torch pinned by constraints.txt, requirements-torchtitan.txt,
# the package installed in editable mode from build/release, as for .venv-libraries/). The report
# goes to build/torchtitan/report.md. TORCHTITAN_ARGS goes to the driver, e.g. "--only fsdp".
TITAN_VENV := $(CURDIR)/.venv-torchtitan
$(eval $(call library_venv,$(TITAN_VENV),requirements-torchtitan.txt))

.PHONY: test-torchtitan
test-torchtitan: build
	@$(MAKE) --no-print-directory $(TITAN_VENV)/.openreg-installed
	$(TITAN_VENV)/bin/python tests/libraries/torchtitan_suite.py --work $(CURDIR)/build/torchtitan $(TORCHTITAN_ARGS)
