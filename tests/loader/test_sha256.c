/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SHA-256 (src/loader/sha256.c):
 *   - the FIPS 180-2 / NIST example vectors: "", "abc", the 448-bit and
 *     896-bit messages, one million 'a' (in 1000-byte updates);
 *   - a 200-byte message split into two updates at every boundary 0..130,
 *     into three updates, and fed one byte at a time, against the one-shot
 *     digest; every length 0..130 one-shot against byte-at-a-time (all the
 *     padding cases: 55, 56, 63, 64 bytes in the last block);
 *   - hex output; throughput (printed, not judged);
 * all of it twice: with the x86 SHA extensions when the CPU has them, and
 * with the portable C code (accel cleared); and both against each other on
 * pseudo-random messages and lengths.
 * Exit 0 pass, 1 fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../harness/check.h"
#include "gpunvme/sha256.h"

static int portable; /* clear accel after every init */

static void init(struct gpunvme_sha256 *c)
{
	gpunvme_sha256_init(c);
	if (portable)
		c->accel = 0;
}

static void digest_hex(const void *msg, size_t len, char hex[65])
{
	struct gpunvme_sha256 c;
	uint8_t d[32];
	init(&c);
	gpunvme_sha256_update(&c, msg, len);
	gpunvme_sha256_final(&c, d);
	gpunvme_sha256_hex(d, hex);
}

static void nist_vectors(void)
{
	static const struct {
		const char *msg;
		const char *hex;
	} v[] = {
		{ "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
		{ "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
		{ "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
		  "mnopqrstnopqrstu",
		  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char hex[65];
		digest_hex(v[i].msg, strlen(v[i].msg), hex);
		CHECK(!strcmp(hex, v[i].hex), "vector %zu (%zu bytes): %s, expected %s", i, strlen(v[i].msg), hex,
		      v[i].hex);
	}

	char a[1000], hex[65];
	uint8_t d[32];
	struct gpunvme_sha256 c;
	memset(a, 'a', sizeof(a));
	init(&c);
	for (int i = 0; i < 1000; i++)
		gpunvme_sha256_update(&c, a, sizeof(a));
	gpunvme_sha256_final(&c, d);
	gpunvme_sha256_hex(d, hex);
	CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
	      "one million 'a': %s", hex);
}

static void splits(void)
{
	uint8_t msg[200], ref[32], d[32];
	struct gpunvme_sha256 c;
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 131 + 7);
	init(&c);
	gpunvme_sha256_update(&c, msg, sizeof(msg));
	gpunvme_sha256_final(&c, ref);

	for (size_t k = 0; k <= 130; k++) {
		init(&c);
		gpunvme_sha256_update(&c, msg, k);
		gpunvme_sha256_update(&c, msg + k, sizeof(msg) - k);
		gpunvme_sha256_final(&c, d);
		CHECK(!memcmp(d, ref, 32), "split at %zu differs", k);
		/* three pieces: k, then 0..k more, then the rest */
		size_t k2 = k + (k % 67);
		init(&c);
		gpunvme_sha256_update(&c, msg, k);
		gpunvme_sha256_update(&c, msg + k, k2 - k);
		gpunvme_sha256_update(&c, msg + k2, sizeof(msg) - k2);
		gpunvme_sha256_final(&c, d);
		CHECK(!memcmp(d, ref, 32), "split at %zu and %zu differs", k, k2);
	}
	init(&c);
	for (size_t i = 0; i < sizeof(msg); i++)
		gpunvme_sha256_update(&c, msg + i, 1);
	gpunvme_sha256_final(&c, d);
	CHECK(!memcmp(d, ref, 32), "byte-at-a-time differs");

	for (size_t len = 0; len <= 130; len++) {
		uint8_t one[32];
		init(&c);
		gpunvme_sha256_update(&c, msg, len);
		gpunvme_sha256_final(&c, one);
		init(&c);
		for (size_t i = 0; i < len; i++)
			gpunvme_sha256_update(&c, msg + i, 1);
		gpunvme_sha256_final(&c, d);
		CHECK(!memcmp(d, one, 32), "length %zu: one-shot and byte-wise differ", len);
	}
}

static void hex(void)
{
	uint8_t d[32];
	char h[65];
	for (int i = 0; i < 32; i++)
		d[i] = (uint8_t)(i * 17 + 0x0f);
	gpunvme_sha256_hex(d, h);
	CHECK(strlen(h) == 64 && !strncmp(h, "0f2031", 6) && !strcmp(h + 58, "fc0d1e"), "hex: %s", h);
}

/* up to 256 MiB, stopping after 2 s (sanitizer builds are slow) */
static void speed(void)
{
	size_t n = 1u << 20;
	uint8_t *b = malloc(n), d[32];
	if (!b) {
		CHECK(0, "out of memory");
		return;
	}
	memset(b, 0x5a, n);
	struct gpunvme_sha256 c;
	struct timespec t0, t1;
	double s = 0;
	int mib = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	init(&c);
	while (mib < 256 && s < 2.0) {
		gpunvme_sha256_update(&c, b, n);
		mib++;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	}
	gpunvme_sha256_final(&c, d);
	printf("sha256: %d MiB in %.3f s (%.0f MB/s)\n", mib, s, mib * 1048576.0 / s / 1e6);
	free(b);
}

/* accelerated and portable digests of the same messages agree */
static void cross(void)
{
	uint8_t msg[4096], d1[32], d2[32];
	uint64_t x = 0x243f6a8885a308d3ull;
	for (size_t i = 0; i < sizeof(msg); i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		msg[i] = (uint8_t)(x >> 56);
	}
	for (size_t len = 0; len <= sizeof(msg); len += 1 + len / 3) {
		struct gpunvme_sha256 a, b;
		gpunvme_sha256_init(&a);
		gpunvme_sha256_init(&b);
		b.accel = 0;
		size_t cut = len / 3;
		gpunvme_sha256_update(&a, msg, cut);
		gpunvme_sha256_update(&a, msg + cut, len - cut);
		gpunvme_sha256_update(&b, msg, len);
		gpunvme_sha256_final(&a, d1);
		gpunvme_sha256_final(&b, d2);
		CHECK(!memcmp(d1, d2, 32), "length %zu: accelerated and portable digests differ", len);
	}
}

int main(void)
{
	struct gpunvme_sha256 probe;
	gpunvme_sha256_init(&probe);
	for (portable = 0; portable <= 1; portable++) {
		if (!portable && !probe.accel) {
			printf("sha256: no SHA extensions on this CPU, portable code only\n");
			continue;
		}
		printf("sha256: %s code\n", portable ? "portable" : "SHA-extensions");
		nist_vectors();
		splits();
		hex();
		speed();
	}
	cross();
	return check_finish("test_sha256");
}
