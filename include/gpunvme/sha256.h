/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SHA-256 (FIPS 180-4), incremental: init, update any number of times with
 * pieces of any length, final. `gpunvme load --json` digests every tensor
 * with it as the tensor sits in its destination; public so that a program
 * can check what it loaded against the same digests without a crypto
 * library of its own. Implemented in src/loader/sha256.c.
 */
#ifndef GPUNVME_SHA256_H
#define GPUNVME_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_SHA256_H */
