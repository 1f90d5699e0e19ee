/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Checks shared by the GPU test programs: every CUDA call's result, every
 * library call's result (with gpunvme_last_error()), and plain failures,
 * each returning 1 from the calling function with file and line.
 */
#ifndef GPUNVME_TEST_GPU_CHECK_H
#define GPUNVME_TEST_GPU_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>

#include "gpunvme/gpunvme.h"

#define CK(x)                                                                                       \
	do {                                                                                        \
		cudaError_t e_ = (x);                                                               \
		if (e_ != cudaSuccess) {                                                            \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			return 1;                                                                   \
		}                                                                                   \
	} while (0)
#define OK(x)                                                                                         \
	do {                                                                                          \
		int r_ = (x);                                                                         \
		if (r_) {                                                                             \
			fprintf(stderr, "%s:%d: %s = %d: %s\n", __FILE__, __LINE__, #x, r_, gpunvme_last_error()); \
			return 1;                                                                     \
		}                                                                                     \
	} while (0)
#define FAIL(...)                                      \
	do {                                           \
		fprintf(stderr, "FAIL: " __VA_ARGS__); \
		return 1;                              \
	} while (0)

#endif
