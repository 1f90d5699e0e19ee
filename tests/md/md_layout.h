/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Test helper shared by tests/md/test_md_loader.c (CPU tier) and
 * tests/gpu/test_gpu_md.cu (GPU tiers): an md RAID0 over several emulated
 * controllers, each its own controller with its own RAM namespace full of
 * random bytes and a metadata 1.2 superblock written as md_p.h lays it out;
 * the array assembled from namespace readers given in reversed order, and a
 * file scattered over the array (tests/loader/layout.h) with its bytes read
 * independently, member by member, from the namespaces' memory.
 */
#ifndef GPUNVME_TEST_MD_LAYOUT_H
#define GPUNVME_TEST_MD_LAYOUT_H

#include "gpunvme/md.h"
#include "layout.h" /* tests/loader */

#define MDL_MAX 4

struct md_layout {
	uint32_t n;
	struct gpunvme_ctrl *c[MDL_MAX];      /* in the order given to assemble */
	uint32_t nsid[MDL_MAX];
	uint8_t *mem[MDL_MAX];
	size_t len[MDL_MAX];
	struct gpunvme_blkdev dev[MDL_MAX];
	struct gpunvme_md *md;
	uint8_t *array;                       /* the array's bytes, member by member */
	uint64_t size;
	struct layout L;
};

static inline void mdl_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

static inline void mdl_put64(uint8_t *p, uint64_t v)
{
	mdl_put32(p, (uint32_t)v);
	mdl_put32(p + 4, (uint32_t)(v >> 32));
}

/* v1.2 superblock at byte 4096: RAID0, chunk_kib, slot `slot` of n, data
 * from 1 MiB to the end of the namespace; alternate layout recorded. */
static inline void mdl_super(uint8_t *ns, size_t len, uint32_t slot, uint32_t n, uint32_t chunk_kib)
{
	uint8_t *b = ns + 4096;
	memset(b, 0, 4096);
	mdl_put32(b, 0xa92b4efc);
	mdl_put32(b + 4, 1);
	mdl_put32(b + 8, 0x1000); /* MD_FEATURE_RAID0_LAYOUT */
	for (int i = 0; i < 16; i++)
		b[16 + i] = (uint8_t)(0x40 + i);
	mdl_put32(b + 72, 0);
	mdl_put32(b + 76, 2);     /* alternate */
	mdl_put32(b + 88, chunk_kib * 2);
	mdl_put32(b + 92, n);
	mdl_put64(b + 128, 2048);
	mdl_put64(b + 136, (len - (1u << 20)) / 512);
	mdl_put64(b + 144, 8);
	mdl_put32(b + 160, slot);
	mdl_put32(b + 220, MDL_MAX);
	for (uint32_t i = 0; i < MDL_MAX; i++)
		mdl_put32(b + 256 + 2 * i, 0xffff);
	b[256 + 2 * slot] = (uint8_t)slot;
	b[257 + 2 * slot] = 0;
	uint64_t sum = 0;
	for (size_t i = 0; i < 256 + 2 * MDL_MAX; i += 4)
		sum += (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 | (uint32_t)b[i + 2] << 16 | (uint32_t)b[i + 3] << 24;
	mdl_put32(b + 216, (uint32_t)((sum & 0xffffffffu) + (sum >> 32)));
}

/* uris[k]: member k's controller; the array is assembled from the members
 * in reversed order. Returns 0 or prints why and returns 1. */
static inline int mdl_setup(struct md_layout *A, const char *const *uris, uint32_t n, uint32_t chunk_kib,
			    uint64_t file_size, uint64_t seed)
{
	memset(A, 0, sizeof(*A));
	A->n = n;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = n - 1 - k; /* position given to assemble */
		A->c[i] = open_emu(uris[k]);
		if (!A->c[i])
			return 1;
		A->nsid[i] = 1;
		A->mem[i] = fill_ns(A->c[i], seed + k, &A->len[i]);
		if (!A->mem[i]) {
			fprintf(stderr, "namespace memory of %s\n", uris[k]);
			return 1;
		}
		mdl_super(A->mem[i], A->len[i], k, n, chunk_kib);
		int rc = gpunvme_blkdev_open_ns(A->c[i], 1, &A->dev[i]);
		if (rc) {
			fprintf(stderr, "blkdev %s: %s\n", uris[k], gpunvme_last_error());
			return 1;
		}
	}
	int rc = gpunvme_md_assemble(A->dev, NULL, n, &A->md);
	if (rc) {
		fprintf(stderr, "assemble: %d %s\n", rc, gpunvme_last_error());
		return 1;
	}
	struct gpunvme_md_info mi;
	gpunvme_md_info(A->md, &mi);
	A->size = mi.size;
	A->array = (uint8_t *)malloc(A->size);
	/* the array's bytes from the members' memory, through gpunvme_md_map
	 * (checked against the superblock-free formula in tests/md/test_md.c
	 * and against the kernel's placement by the mdadm fixtures) */
	for (uint64_t o = 0; o < A->size;) {
		uint32_t m = 0;
		uint64_t moff = 0, run = 0;
		if (gpunvme_md_map(A->md, o, &m, &moff, &run))
			return 1;
		memcpy(A->array + o, A->mem[m] + moff, run);
		o += run;
	}
	for (uint32_t i = 0; i < n; i++)
		gpunvme_blkdev_release(&A->dev[i]);
	make_layout(&A->L, A->array, A->size, file_size, seed);
	return 0;
}

static inline void mdl_teardown(struct md_layout *A)
{
	gpunvme_md_close(A->md);
	for (uint32_t i = 0; i < A->n; i++) {
		gpunvme_blkdev_close(&A->dev[i]);
		gpunvme_close(A->c[i]);
	}
	free(A->array);
	free(A->L.ref);
}

#endif
