/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Base utilities every layer may use and that use no other src/ folder:
 * the thread's last error message and the monotonic clock. Usable from
 * CUDA C++ translation units too (C linkage).
 */
#ifndef GPUNVME_BASE_H
#define GPUNVME_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the text gpunvme_last_error() returns and returns rc, so that
 * `return gpunvme_set_error(-EINVAL, "...")` reports and fails at once. */
int gpunvme_set_error(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t gpunvme_now_ns(void);

/* CRC32C (Castagnoli). _raw: the bare register update, no inversion (ext4
 * passes its seed). gpunvme_crc32c: the conventional form, inverted on the
 * way in and out, so that crc32c(0, "123456789", 9) == 0xE3069283 and a
 * buffer can be fed in pieces: crc = gpunvme_crc32c(crc, piece, n). */
uint32_t gpunvme_crc32c_raw(uint32_t crc, const void *buf, size_t len);
uint32_t gpunvme_crc32c(uint32_t crc, const void *buf, size_t len);

/* len bytes of file fd at off into buf, through short reads and EINTR:
 * 0, -errno, or -EIO where the file ends first. */
int gpunvme_pread_all(int fd, void *buf, size_t len, uint64_t off);

#ifdef __cplusplus
}
#endif

#endif
