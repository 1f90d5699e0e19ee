#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Install what building and testing gpu-nvme-direct needs on Debian 12
# (bookworm), without a GPU: the CMake build detects CUDA on its own and
# builds without it when nvcc is absent, so no CUDA package is listed here.
#   build-essential, cmake    the C build (CMake >= 3.25: bookworm has 3.25)
#   clang, libclang-rt-14-dev libFuzzer and the clang sanitizer runtimes
#                             (make fuzz builds with CC=clang)
#   pkg-config, git, python3  helper scripts (tests/fuzz/gen_corpus.py)
#   valgrind                  instruction counts (bench/callgrind_driver.sh)
#   qemu-system-x86, cpio, kmod  the QEMU guest tests (tests/qemu); the guest
#                             kernel and busybox come from scripts/qemu/setup.sh
#   xfsprogs, e2fsprogs, zstd  file system images for the extent decoders' tests
#   python3-dev, -numpy, -pytest, -setuptools, -venv, -wheel  the Python package
#                             (python/: headers for the extension, its tests;
#                             make python / make test-python install nothing else)
#   fdisk                      sfdisk: partition tables for the partition tests
# Run as root (CI) or through sudo.
set -euo pipefail

PACKAGES=(
	build-essential
	cmake
	clang
	libclang-rt-14-dev
	pkg-config
	git
	python3
	python3-dev
	python3-numpy
	python3-pytest
	python3-setuptools
	python3-venv
	python3-wheel
	valgrind
	qemu-system-x86
	cpio
	kmod
	xfsprogs
	e2fsprogs
	fdisk
	zstd
)

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${PACKAGES[@]}"
