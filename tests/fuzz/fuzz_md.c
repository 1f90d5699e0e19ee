/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for md superblocks and assembly (src/md/md.c): byte 0
 * gives the member count (1-4), the rest of the input is cut into that many
 * equal members. Every member is examined; the set is assembled (any
 * superblock fields, any roles, sizes, chunk, layout); an array that
 * assembles is read through its block source at its start, middle and end,
 * mapped at many offsets (each mapping must land inside its member), and a
 * synthetic file's extents are split per member (every byte once).
 *
 * Seeds (gen_corpus_md.py, at test time): RAID0 and linear arrays with
 * metadata 1.2, 1.1, 1.0 and 0.90, one and two strip zones.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_disk.h"
#include "gpunvme/md.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* 0.90 superblocks sit in the last 64 KiB of a member of >= 128 KiB */
	static char max_len[] = "-max_len=600000";
	char **v = calloc((size_t)*argc + 2, sizeof(*v));
	if (!v)
		return 0;
	memcpy(v, *argv, (size_t)*argc * sizeof(*v));
	v[(*argc)++] = max_len;
	v[*argc] = NULL;
	*argv = v;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t n = (size_t)(data[0] % 4) + 1, each = (size - 1) / n;
	struct fuzz_mem m[4];
	struct gpunvme_blkdev dev[4];
	for (size_t i = 0; i < n; i++) {
		m[i] = (struct fuzz_mem){ data + 1 + i * each, each };
		dev[i] = fuzz_mem_dev(&m[i], 512);
		struct gpunvme_md_super sb;
		if (gpunvme_md_examine(&dev[i], &sb) == 0 && sb.data_offset + sb.data_bytes > each)
			abort(); /* a superblock's data must lie on its member */
	}
	struct gpunvme_md *md = NULL;
	if (gpunvme_md_assemble(dev, NULL, n, &md))
		return 0;
	struct gpunvme_md_info mi;
	gpunvme_md_info(md, &mi);
	if (mi.size == 0)
		abort();
	uint8_t buf[1024];
	struct gpunvme_blkdev a;
	gpunvme_md_blkdev(md, &a);
	uint64_t at[3] = { 0, mi.size / 2, mi.size > sizeof(buf) ? mi.size - sizeof(buf) : 0 };
	for (int i = 0; i < 3; i++) {
		size_t len = mi.size - at[i] < sizeof(buf) ? (size_t)(mi.size - at[i]) : sizeof(buf);
		if (a.read(a.ctx, at[i], buf, len))
			abort(); /* every array byte is on a member */
	}
	for (uint64_t o = 0, k = 0; o < mi.size && k < 4096; k++) {
		uint32_t mem = 0;
		uint64_t moff = 0, run = 0;
		if (gpunvme_md_map(md, o, &mem, &moff, &run) || mem >= n || run == 0 || run > mi.size - o ||
		    moff > each || run > each - moff)
			abort();
		o += run;
	}
	/* a file over the whole array in two extents with a hole between */
	uint64_t half = mi.size / 2;
	struct gpunvme_extent ext[2] = { { 0, 0, half ? half : 1, 0 }, { (half ? half : 1) + 4096, half, mi.size - half, 0 } };
	size_t ne = mi.size - half ? 2 : 1;
	uint64_t fsize = ext[ne - 1].logical + ext[ne - 1].length;
	uint64_t covered = 0;
	for (uint32_t k = 0; k < n; k++) {
		struct gpunvme_extent *me = NULL;
		size_t nme = 0;
		if (gpunvme_md_member_extents(md, ext, ne, fsize, k, &me, &nme) == 0)
			for (size_t i = 0; i < nme; i++)
				covered += (me[i].flags & GPUNVME_EXTENT_ELSEWHERE) ? 0 : me[i].length;
		free(me);
	}
	if (covered != (ne == 2 ? mi.size : ext[0].length))
		abort(); /* every mapped file byte read by exactly one member */
	gpunvme_md_close(md);
	return 0;
}
