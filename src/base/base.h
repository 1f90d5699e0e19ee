/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Base utilities every layer may use and that use no other src/ folder:
 * the thread's last error message and the monotonic clock. Usable from
 * CUDA C++ translation units too (C linkage).
 */
#ifndef GPUNVME_BASE_H
#define GPUNVME_BASE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the text gpunvme_last_error() returns and returns rc, so that
 * `return gpunvme_set_error(-EINVAL, "...")` reports and fails at once. */
int gpunvme_set_error(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t gpunvme_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif
