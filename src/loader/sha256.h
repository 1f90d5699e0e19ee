/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SHA-256 (FIPS 180-4), incremental: init, update any number of times with
 * pieces of any length, final. Used to verify model files and tensor data
 * after they were read through the driver. Internal to the library (and its
 * CLI and tests): include as "loader/sha256.h".
 */
#ifndef GPUNVME_LOADER_SHA256_H
#define GPUNVME_LOADER_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct gpunvme_sha256 {
	uint32_t h[8];     /* intermediate hash value H(i) (§6.2.2) */
	uint64_t bytes;    /* message length so far */
	uint8_t buf[64];   /* partial block */
	uint32_t fill;     /* bytes in buf */
	/* set by init when the CPU has the x86 SHA extensions (several times
	 * faster); clearing it after init selects the portable C code, which
	 * the tests use to check both */
	uint32_t accel;
};

void gpunvme_sha256_init(struct gpunvme_sha256 *c);
void gpunvme_sha256_update(struct gpunvme_sha256 *c, const void *data, size_t len);
/* Pad, write the 32-byte digest; the context must be re-initialised before
 * it is used again. */
void gpunvme_sha256_final(struct gpunvme_sha256 *c, uint8_t out[32]);
/* Lower-case hex of a digest, NUL-terminated. */
void gpunvme_sha256_hex(const uint8_t d[32], char out[65]);

#endif
