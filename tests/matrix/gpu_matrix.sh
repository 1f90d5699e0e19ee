#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The combination matrix's GPU cells (python/tests/test_matrix.py) on a GPU
# machine: every cell, Tier 1 and Tier 2 included, must run (a cell refused
# for want of a GPU, a CUDA build or torch fails: GPUNVME_MATRIX_GPU=1).
#   gpu_matrix.sh REPO BUILD [PYTHON]
# PYTHON: a python with gpunvme built with GPUNVME_CUDA=ON and torch with
# CUDA (default: BUILD/pyvenv/bin/python, the venv of `make python`).
# Exit 0 pass, 1 fail, 77 without a GPU.
set -u
REPO=${1:?usage: gpu_matrix.sh REPO BUILD [PYTHON]}
BUILD=${2:?}
PY=${3:-$BUILD/pyvenv/bin/python}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "no CUDA GPU: skipped"; exit 77; }
# the cells' volumes are made with these; without one every cell would
# skip and only the completeness check would say so
for t in mkfs.ext4 sfdisk zstd; do
	command -v $t >/dev/null 2>&1 || { echo "FAIL: no $t on PATH: the matrix's volumes are made with it (e2fsprogs, util-linux fdisk, zstd)"; exit 1; }
done
[ -x "$PY" ] || { echo "FAIL: no $PY: make python (GPUNVME_CUDA=ON), or pass a python that has gpunvme and torch"; exit 1; }
cd "$REPO/python/tests" || exit 1
GPUNVME_MATRIX_GPU=1 GPUNVME_BUILD=$BUILD exec "$PY" -m pytest -q -p no:cacheprovider test_matrix.py
