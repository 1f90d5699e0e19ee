/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), table driven, the
 * one copy in the library: ext4's metadata checksums (seeded, no
 * inversion) and NVMe/TCP's header and data digests (NVMe/TCP 1.0 §3.6.1:
 * CRC32C with the usual all-ones start and final inversion).
 */
#include <pthread.h>

#include "base/base.h"

static uint32_t tab[256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		tab[i] = c;
	}
}

uint32_t gpunvme_crc32c_raw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&tab_once, tab_init);
	const uint8_t *p = buf;
	while (len--)
		crc = tab[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

uint32_t gpunvme_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return ~gpunvme_crc32c_raw(~crc, buf, len);
}
