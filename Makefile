# OpenReg: `make test` and `make demo` do everything from a fresh Debian machine.
# See README.md. Build trees live under build/ (release, asan, tsan).

JOBS ?= $(shell nproc)
CMAKE_COMMON := -DOPENREG_BUILD_TESTS=ON
SOURCES = $(shell find runtime bench -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.c')

# Sanitizer runs: shorter stress loops, and no 1 s sleep at exit per TSan process.
SANITIZER_ENV := OPENREG_STRESS_SCALE=4 TSAN_OPTIONS=atexit_sleep_ms=0:second_deadlock_stack=1 \
                 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1

.PHONY: all setup build test test-runtime sanitize check-docs check-format format demo bench clean

all: build

setup:
	@scripts/setup.sh

# Configure once per tree, then let CMake's own dependency tracking decide what to rebuild.
build/release/CMakeCache.txt:
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release $(CMAKE_COMMON)
build/asan/CMakeCache.txt:
	cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DOPENREG_BUILD_BENCH=OFF \
	  -DOPENREG_SANITIZE=address,undefined $(CMAKE_COMMON)
build/tsan/CMakeCache.txt:
	cmake -S . -B build/tsan -DCMAKE_BUILD_TYPE=Debug -DOPENREG_BUILD_BENCH=OFF \
	  -DOPENREG_SANITIZE=thread $(CMAKE_COMMON)

build: setup build/release/CMakeCache.txt
	cmake --build build/release -j $(JOBS)

test-runtime: build
	cd build/release && ctest -j $(JOBS) --output-on-failure

sanitize: setup build/asan/CMakeCache.txt build/tsan/CMakeCache.txt
	cmake --build build/asan -j $(JOBS)
	cd build/asan && $(SANITIZER_ENV) ctest -j $(JOBS) --output-on-failure
	cmake --build build/tsan -j $(JOBS)
	cd build/tsan && $(SANITIZER_ENV) ctest -j $(JOBS) --output-on-failure

check-docs:
	python3 tools/check_doc_markers.py

check-format: setup
	clang-format --dry-run --Werror $(SOURCES)

format: setup
	clang-format -i $(SOURCES)

test: check-format check-docs test-runtime sanitize

demo: build
	build/release/runtime/runtime_tour

bench: build
	@mkdir -p bench/results
	build/release/bench/runtime_bench bench/results/runtime.json

clean:
	rm -rf build
