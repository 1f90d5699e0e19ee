/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SHA-256 after FIPS 180-4: §4.1.2 functions, §4.2.2 constants, §5.1.1
 * padding, §5.3.3 initial hash value, §6.2.2 computation. Portable C, with
 * the 64 rounds unrolled eight at a time (the working variables rotate by
 * renaming instead of moving) so gcc -O2 keeps them in registers; and on
 * x86-64 CPUs with the SHA extensions (Intel since Goldmont/Ice Lake, AMD
 * since Zen), the same compression through SHA256RNDS2/MSG1/MSG2, chosen
 * at run time by CPUID: several times faster, which matters when a model
 * of tens of GiB is verified after loading.
 */
#include <string.h>

#include "gpunvme/sha256.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHA256_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* §4.2.2: the first 32 bits of the fractional parts of the cube roots of
 * the first 64 primes. */
static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

/* §4.1.2 (4.2)-(4.7) */
#define CH(x, y, z)  (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define BSIG0(x)     (ror(x, 2) ^ ror(x, 13) ^ ror(x, 22))
#define BSIG1(x)     (ror(x, 6) ^ ror(x, 11) ^ ror(x, 25))
#define SSIG0(x)     (ror(x, 7) ^ ror(x, 18) ^ ((x) >> 3))
#define SSIG1(x)     (ror(x, 17) ^ ror(x, 19) ^ ((x) >> 10))

static inline uint32_t be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* One round of §6.2.2 step 3, with the working variables named by the
 * caller: T1 goes into d (becoming the new e) and T1 + T2 into h (becoming
 * the new a). */
#define ROUND(a, b, c, d, e, f, g, h, i)                                   \
	do {                                                               \
		uint32_t t1_ = h + BSIG1(e) + CH(e, f, g) + K[i] + w[i];   \
		d += t1_;                                                  \
		h = t1_ + BSIG0(a) + MAJ(a, b, c);                         \
	} while (0)

static void compress1(uint32_t st[8], const uint8_t *blk)
{
	uint32_t w[64];
	/* §6.2.2 step 1: the message schedule */
	for (int t = 0; t < 16; t++)
		w[t] = be32(blk + 4 * t);
	for (int t = 16; t < 64; t++)
		w[t] = SSIG1(w[t - 2]) + w[t - 7] + SSIG0(w[t - 15]) + w[t - 16];

	uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
	uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
	for (int i = 0; i < 64; i += 8) {
		ROUND(a, b, c, d, e, f, g, h, i + 0);
		ROUND(h, a, b, c, d, e, f, g, i + 1);
		ROUND(g, h, a, b, c, d, e, f, i + 2);
		ROUND(f, g, h, a, b, c, d, e, i + 3);
		ROUND(e, f, g, h, a, b, c, d, i + 4);
		ROUND(d, e, f, g, h, a, b, c, i + 5);
		ROUND(c, d, e, f, g, h, a, b, i + 6);
		ROUND(b, c, d, e, f, g, h, a, i + 7);
	}
	/* §6.2.2 step 4 */
	st[0] += a; st[1] += b; st[2] += c; st[3] += d;
	st[4] += e; st[5] += f; st[6] += g; st[7] += h;
}

#ifdef SHA256_X86
/* The x86 SHA extensions keep the state as two vectors, ABEF and CDGH
 * (lane 3 first), and do two rounds per SHA256RNDS2 with W[t] + K[t] of
 * those rounds in the low 64 bits of the message operand. The schedule
 * (§6.2.2 step 1) four words at a time: MSG1 gives W[t-16] + s0(W[t-15]),
 * the W[t-7] terms are added from the two previous vectors, MSG2 adds
 * s1(W[t-2]). Intel's "New Instructions Supporting the Secure Hash
 * Algorithm on Intel Architecture Processors" (2013) describes the use. */
__attribute__((target("sha,ssse3,sse4.1"))) static void compress_shani(uint32_t st[8], const uint8_t *p,
								      size_t nblk)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
	__m128i abcd = _mm_loadu_si128((const __m128i *)&st[0]);
	__m128i efgh = _mm_loadu_si128((const __m128i *)&st[4]);
	__m128i badc = _mm_shuffle_epi32(abcd, 0xb1);
	__m128i hgfe = _mm_shuffle_epi32(efgh, 0x1b);
	__m128i s0 = _mm_alignr_epi8(badc, hgfe, 8);       /* ABEF */
	__m128i s1 = _mm_blend_epi16(hgfe, badc, 0xf0);    /* CDGH */
	for (; nblk; nblk--, p += 64) {
		__m128i save0 = s0, save1 = s1, m[4];
		for (int g = 0; g < 16; g++) {
			__m128i w;
			if (g < 4) {
				w = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
			} else {
				w = _mm_sha256msg1_epu32(m[g & 3], m[(g + 1) & 3]);
				w = _mm_add_epi32(w, _mm_alignr_epi8(m[(g + 3) & 3], m[(g + 2) & 3], 4));
				w = _mm_sha256msg2_epu32(w, m[(g + 3) & 3]);
			}
			m[g & 3] = w;
			__m128i wk = _mm_add_epi32(w, _mm_loadu_si128((const __m128i *)&K[4 * g]));
			s1 = _mm_sha256rnds2_epu32(s1, s0, wk);
			s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(wk, 0x0e));
		}
		s0 = _mm_add_epi32(s0, save0);
		s1 = _mm_add_epi32(s1, save1);
	}
	__m128i feba = _mm_shuffle_epi32(s0, 0x1b);
	__m128i dchg = _mm_shuffle_epi32(s1, 0xb1);
	_mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(feba, dchg, 0xf0)); /* DCBA: H0..H3 */
	_mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(dchg, feba, 8));   /* HGFE: H4..H7 */
}

static uint32_t have_shani(void)
{
	unsigned a, b, c, d;
	/* CPUID.1:ECX SSSE3 (bit 9), SSE4.1 (bit 19); CPUID.(7,0):EBX SHA (bit 29) */
	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19)))
		return 0;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	return (b >> 29) & 1;
}
#else
static uint32_t have_shani(void) { return 0; }
#endif

static void compress(struct gpunvme_sha256 *c, const uint8_t *p, size_t nblk)
{
#ifdef SHA256_X86
	if (c->accel) {
		compress_shani(c->h, p, nblk);
		return;
	}
#endif
	for (; nblk; nblk--, p += 64)
		compress1(c->h, p);
}

void gpunvme_sha256_init(struct gpunvme_sha256 *c)
{
	/* §5.3.3: the first 32 bits of the fractional parts of the square
	 * roots of the first 8 primes. */
	static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
					0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(c->h, h0, sizeof(h0));
	c->bytes = 0;
	c->fill = 0;
	c->accel = have_shani();
}

void gpunvme_sha256_update(struct gpunvme_sha256 *c, const void *data, size_t len)
{
	const uint8_t *p = data;
	c->bytes += len;
	if (c->fill) {
		size_t k = 64 - c->fill;
		if (k > len)
			k = len;
		memcpy(c->buf + c->fill, p, k);
		c->fill += (uint32_t)k;
		p += k;
		len -= k;
		if (c->fill < 64)
			return;
		compress(c, c->buf, 1);
		c->fill = 0;
	}
	/* whole blocks straight from the caller's buffer, no copy */
	compress(c, p, len / 64);
	p += len / 64 * 64;
	len %= 64;
	memcpy(c->buf, p, len);
	c->fill = (uint32_t)len;
}

void gpunvme_sha256_final(struct gpunvme_sha256 *c, uint8_t out[32])
{
	/* §5.1.1: a 1 bit, zeros up to 448 mod 512 bits, then the message
	 * length in bits as a 64-bit big-endian number. */
	uint64_t bits = c->bytes * 8;
	c->buf[c->fill++] = 0x80;
	if (c->fill > 56) {
		memset(c->buf + c->fill, 0, 64 - c->fill);
		compress(c, c->buf, 1);
		c->fill = 0;
	}
	memset(c->buf + c->fill, 0, 56 - c->fill);
	for (int i = 0; i < 8; i++)
		c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	compress(c, c->buf, 1);
	for (int i = 0; i < 8; i++) {
		out[4 * i + 0] = (uint8_t)(c->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)c->h[i];
	}
	memset(c, 0, sizeof(*c));
}

void gpunvme_sha256_hex(const uint8_t d[32], char out[65])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[64] = 0;
}
