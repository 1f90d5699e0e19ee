/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CHECK(cond, fmt, ...) for tests that drive the library directly: a failed
 * check prints where, the message and the library's last error, counts in
 * `failures` and goes on, so one run lists every broken expectation.
 */
#ifndef GPUNVME_TEST_CHECK_H
#define GPUNVME_TEST_CHECK_H

#include <stdio.h>

#include "gpunvme/gpunvme.h" /* gpunvme_last_error */

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " [last error: %s]\n", gpunvme_last_error()); \
			failures++;                                            \
		}                                                              \
	} while (0)

#endif
