/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for the partition table reader (src/fs/part.c) and the
 * file system locator built on it: the input is a whole disk, read as
 * 512-byte LBAs and, when it is long enough, again as 4096-byte LBAs (a
 * GPT is then looked for at byte 4096). gpunvme_part_list, then
 * gpunvme_fs_locate for "automatic" and partitions 1..5, each of which
 * probes for ext4/XFS superblocks at the offsets the table claims. Whatever
 * the bytes, the reader returns a list or an error: no read out of bounds,
 * no leak, no unbounded walk (EBR loops, huge entry counts).
 *
 * Seeds (gen_corpus_part.sh): 64 KiB disks partitioned by sfdisk: GPT with
 * two partitions, MBR with primary, extended and logical partitions, a
 * protective MBR alone; a bare file system (no table).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/extents.h"
#include "fuzz_disk.h"
#include "gpunvme/part.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return fuzz_disk_max_len(argc, argv);
}

static void one(const uint8_t *data, size_t size, uint32_t lba)
{
	struct fuzz_mem m = { data, size };
	struct gpunvme_blkdev dev = fuzz_mem_dev(&m, lba);
	struct gpunvme_partition *parts = NULL;
	size_t n = 0;
	const char *scheme = NULL;
	if (gpunvme_part_list(&dev, &parts, &n, &scheme) == 0) {
		/* every listed partition lies on the device */
		for (size_t i = 0; i < n; i++)
			if (parts[i].offset > size || parts[i].size > size - parts[i].offset || !scheme)
				abort();
	}
	free(parts);
	uint64_t off = 0;
	for (uint32_t p = 0; p <= 5; p++)
		if (gpunvme_fs_locate(&dev, p, &off) == 0 && off >= size)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	one(data, size, 512);
	if (size >= 4 * 4096)
		one(data, size, 4096);
	return 0;
}
