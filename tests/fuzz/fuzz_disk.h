/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Pieces shared by the fuzz targets whose input is a whole disk or image
 * (fuzz_ext4, fuzz_part): a block source over the input, and the raised
 * input size limit such an image needs.
 */
#ifndef GPUNVME_FUZZ_DISK_H
#define GPUNVME_FUZZ_DISK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/extents.h"

/* run_fuzz.sh passes -max_len=4096 (right for the emulator's operation
 * streams); an image needs more: a later flag wins in libFuzzer, so the
 * target's LLVMFuzzerInitialize appends one before the flags are parsed. */
static inline int fuzz_disk_max_len(int *argc, char ***argv)
{
	static char max_len[] = "-max_len=65536";
	char **v = calloc((size_t)*argc + 2, sizeof(*v));
	if (!v)
		return 0;
	memcpy(v, *argv, (size_t)*argc * sizeof(*v));
	v[(*argc)++] = max_len;
	v[*argc] = NULL;
	*argv = v; /* lives for the whole run */
	return 0;
}

struct fuzz_mem {
	const uint8_t *p;
	size_t n;
};

/* reads past the input fail with -EIO, as a device's end does */
static inline int fuzz_mem_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	const struct fuzz_mem *m = ctx;
	if (off > m->n || len > m->n - off)
		return -5; /* -EIO */
	memcpy(buf, m->p + off, len);
	return 0;
}

static inline void fuzz_mem_close(void *ctx) { (void)ctx; }

/* A block source of `lba`-byte blocks over m. */
static inline struct gpunvme_blkdev fuzz_mem_dev(struct fuzz_mem *m, uint32_t lba)
{
	struct gpunvme_blkdev d = { .read = fuzz_mem_read, .close = fuzz_mem_close, .ctx = m, .size = m->n,
				    .lba_size = lba };
	return d;
}

#endif
