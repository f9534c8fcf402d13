# mantissa: `make demo` and `make test` are all a newcomer needs. Each installs missing Debian packages,
# configures CMake (Ninja, Release with assertions on) into $(BUILD) and builds with $(JOBS) cores.
#   make build   configure and build everything (library, tests, programs, benchmarks)
#   make test    build, then run the whole suite through ctest
#   make demo    build and run mantissa-train with its defaults (MLP, Fashion-MNIST, fp16), printing test accuracy
#   make bench   build the benchmark programs (and set up PyTorch 2.x from PyPI in build/bench-venv for the comparisons)
#   make clean   remove $(BUILD)
# Environment: MANTISSA_WERROR=ON makes warnings errors (CI); MANTISSA_CUDA / MANTISSA_MPI = ON|OFF
# override the defaults (ON when nvcc / MPI are found). BUILD and JOBS may be set on the command line.

BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
MANTISSA_WERROR ?= OFF

CMAKE_ARGS := -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=$(MANTISSA_WERROR)
ifneq ($(MANTISSA_CUDA),)
CMAKE_ARGS += -DMANTISSA_CUDA=$(MANTISSA_CUDA)
endif
ifneq ($(MANTISSA_MPI),)
CMAKE_ARGS += -DMANTISSA_MPI=$(MANTISSA_MPI)
endif

.PHONY: all deps bench-deps configure build test demo bench clean
all: build

deps:
	@scripts/install-deps.sh

bench-deps:
	@scripts/install-deps.sh --bench

# Re-running CMake on an existing build tree takes a second or two and picks up changed options.
configure: deps
	cmake -S . -B $(BUILD) $(CMAKE_ARGS) -DMANTISSA_BUILD_TESTS=ON -DMANTISSA_BUILD_BENCH=ON

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target mantissa-train
	$(BUILD)/train/mantissa-train

# Each bench/*_bench.cc is its own program, named after the file; cpu_peak measures the CPU's peak and
# mantissa-train runs the Trainer rows of bench/compare_pytorch.sh.
BENCH_PROGRAMS := $(patsubst bench/%.cc,%,$(wildcard bench/*_bench.cc)) cpu_peak mantissa-train
bench: bench-deps configure
ifeq ($(BENCH_PROGRAMS),)
	@echo "make bench: no bench/*_bench.cc yet"
else
	cmake --build $(BUILD) -j $(JOBS) --target $(BENCH_PROGRAMS)
	@echo "built: $(addprefix $(BUILD)/bench/,$(BENCH_PROGRAMS))"
endif

clean:
	rm -rf $(BUILD)
