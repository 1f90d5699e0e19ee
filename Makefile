# SPDX-License-Identifier: BSD-2-Clause
# Top-level entry points. Build trees:
#   build/       normal build (CUDA when nvcc is found); CLI at build/bin/gpunvme
#   build-asan/  C code under AddressSanitizer + UndefinedBehaviorSanitizer
#   build-tsan/  C code under ThreadSanitizer (stress tests)
#   build-fuzz/  libFuzzer targets (clang)
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 20
QEMU_CACHE ?= build/qemu-cache
QEMU_KMOD_CACHE ?= build/qemu-cache-kmod
QEMU_KMOD_CACHE_6_12 ?= build/qemu-cache-kmod-6.12
KDIR ?= /lib/modules/$(shell uname -r)/build
CMAKE ?= cmake
CTEST ?= ctest

PYVENV ?= build/pyvenv
PYTHON3 ?= /usr/bin/python3

.PHONY: all build lint test test-asan test-tsan test-gpu test-qemu test-kmod kmod test-python python fuzz fuzz-build demo bench fs-fixtures clean

all: build

build:
	$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
	$(CMAKE) --build build -j $(JOBS)

# Every suite that can run on this machine: unit + emulator conformance under
# ASan/UBSan, the stress test under TSan, fuzz smoke runs, GPU tests (they
# report "skipped" without a GPU).
test: lint test-asan test-tsan fuzz test-gpu test-qemu test-python

# No include cycles between src/ folders (scripts/lint-includes.sh).
lint:
	scripts/lint-includes.sh
	bench/check_links.sh

test-asan:
	$(CMAKE) -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGPUNVME_SANITIZE=address,undefined
	$(CMAKE) --build build-asan -j $(JOBS)
	cd build-asan && $(CTEST) --output-on-failure -j $(JOBS) -L 'unit|emu|io|soak|cli|fs|loader|doctor|md|nvmf|moe'
	@echo "== soak.cpu_faults figures (build-asan/tests/soak/soak.cpu_faults.log)"
	@cat build-asan/tests/soak/soak.cpu_faults.log

test-tsan:
	$(CMAKE) -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUNVME_SANITIZE=thread
	$(CMAKE) --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 $(CTEST) --output-on-failure -L stress

# QEMU guest tests: the driver against QEMU's NVMe controller over vfio-pci
# (intel-iommu) and uio_pci_generic. The guest kernel is cached by
# scripts/qemu/setup.sh (CI runs it with network); without it they skip.
# The kernel-module tests (label kmod, also qemu) boot Debian's generic
# kernels 6.1 and 6.12, cached with their headers by setup.sh --generic.
test-qemu: build
	-scripts/qemu/setup.sh --no-install $(QEMU_CACHE)
	-scripts/qemu/setup.sh --no-install --generic $(QEMU_KMOD_CACHE)
	-scripts/qemu/setup.sh --no-install --generic --kernel 6.12 $(QEMU_KMOD_CACHE_6_12)
	cd build && $(CTEST) --output-on-failure -j $(JOBS) -L qemu

test-kmod: build
	-scripts/qemu/setup.sh --no-install --generic $(QEMU_KMOD_CACHE)
	-scripts/qemu/setup.sh --no-install --generic --kernel 6.12 $(QEMU_KMOD_CACHE_6_12)
	cd build && $(CTEST) --output-on-failure -L kmod

# The kernel module for the running kernel (KDIR=... for other headers);
# says which package to install when the headers are missing.
kmod:
	$(MAKE) -C kmod KDIR=$(KDIR)

# The Python package (python/): a venv that sees the system's numpy and
# pytest (Debian packages; nothing is downloaded), the extension built from
# this tree by python/setup.py through CMake. GPUNVME_CUDA=ON|OFF|AUTO picks
# the CUDA backend as for the C build.
python:
	$(PYTHON3) -m venv --system-site-packages $(PYVENV)
	$(PYVENV)/bin/pip install --no-build-isolation --no-index ./python

# The combination matrix (python/tests/test_matrix.py) runs the CLI and
# build/bin/matrix_stream too: the build comes first.
test-python: build python
	$(PYVENV)/bin/python -m pytest -q python/tests

# gpu.matrix (tests/matrix/gpu_matrix.sh) runs the combination matrix's GPU
# cells through the venv of `make python`
test-gpu: build python
	cd build && $(CTEST) --output-on-failure -L gpu

fuzz-build:
	CC=clang $(CMAKE) -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUNVME_FUZZ=ON -DGPUNVME_CUDA=OFF
	$(CMAKE) --build build-fuzz -j $(JOBS)

# make fuzz FUZZ_SECONDS=600 for a longer run
fuzz: fuzz-build
	cd build-fuzz && FUZZ_SECONDS=$(FUZZ_SECONDS) $(CTEST) --output-on-failure -L fuzz

# The emulator trace, then the main job: a synthetic >= 512 MiB safetensors
# model in ext4 (and XFS) images, loaded through the driver with --verify.
demo: build
	./build/bin/gpunvme-emu-demo
	scripts/demo-load.sh build

bench: build
	./build/bin/bench_emu_null

# Rebuild the file system fixtures in tests/fs/fixtures (mkfs on the host,
# files written through real mounts in the QEMU guest; needs the QEMU cache)
fs-fixtures:
	scripts/fixtures/make-fs-fixtures.sh

# Build outputs only (each is in .gitignore; python/tests/test_edges.py
# checks that nothing here is tracked): the egg-info was once committed,
# and clean deleted it from the checkout
clean:
	rm -rf build build-asan build-tsan build-fuzz python/build python/src/gpunvme.egg-info
	rm -f python/src/gpunvme/_gpunvme*.so
