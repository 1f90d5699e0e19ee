/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for the ext2/3/4 decoder (src/fs/ext4.c through the
 * src/fs front end): the input is the whole image, a block source reads it
 * from memory and fails reads past its end. After a successful open the
 * target walks everything reachable from the root (bounded): readdir, stat,
 * extents, pread of files and symlinks, path lookups, stat of the first
 * inode numbers. Whatever the image holds, the decoder must return an error
 * or a result, never read out of bounds, leak or hang.
 *
 * Seeds (tests/fuzz/corpus-ext4) are whole 64 KiB images made by mkfs.ext4
 * -d (tests/fuzz/gen_corpus_ext4.sh): 1 KiB blocks, with and without
 * metadata_csum, ext2 indirect blocks, inline_data, a multi-extent file.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/extents.h"
#include "fuzz_disk.h"

#define MAX_ENTRIES 512  /* work bound per input */
#define MAX_DEPTH   6

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return fuzz_disk_max_len(argc, argv);
}

struct names {
	uint64_t ino[64];
	char name[64][32];
	int n;
	int *budget;
};

static int collect(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct names *d = arg;
	(void)ftype;
	if (--*d->budget < 0)
		return 1;
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && !memcmp(name, "..", 2)))
		return 0;
	if (d->n < 64) {
		size_t k = namelen < 31 ? namelen : 31;
		memcpy(d->name[d->n], name, k);
		d->name[d->n][k] = 0;
		d->ino[d->n++] = ino;
	}
	return 0;
}

static uint8_t buf[16384];

static void visit(struct gpunvme_fs *fs, uint64_t ino, int depth, int *budget)
{
	struct gpunvme_stat st;
	if (depth > MAX_DEPTH || *budget <= 0 || gpunvme_fs_stat(fs, ino, &st))
		return;
	if ((st.mode & 0170000) == 0040000) {
		struct names *d = malloc(sizeof(*d));
		if (!d)
			return;
		d->n = 0;
		d->budget = budget;
		gpunvme_fs_readdir(fs, ino, collect, d);
		for (int i = 0; i < d->n; i++)
			visit(fs, d->ino[i], depth + 1, budget);
		free(d);
		return;
	}
	if ((st.mode & 0170000) == 0100000) {
		struct gpunvme_extent *x = NULL;
		size_t n = 0;
		if (!gpunvme_fs_extents(fs, ino, &x, &n)) {
			uint64_t contig;
			if (n)
				gpunvme_extent_map(x, n, x[n / 2].logical, &contig);
			free(x);
		}
	}
	gpunvme_fs_pread(fs, ino, buf, sizeof(buf), 0);
	if (st.size > sizeof(buf))
		gpunvme_fs_pread(fs, ino, buf, sizeof(buf), st.size / 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_mem m = { data, size };
	struct gpunvme_blkdev dev = fuzz_mem_dev(&m, 512);
	struct gpunvme_fs *fs;
	if (gpunvme_fs_open(&dev, 0, &fs))
		return 0;
	int budget = MAX_ENTRIES;
	visit(fs, 2, 0, &budget);
	uint64_t ino;
	gpunvme_fs_lookup(fs, "/d/a", &ino);
	gpunvme_fs_lookup(fs, "lost+found/x", &ino);
	for (uint64_t i = 1; i <= 24; i++) {
		struct gpunvme_stat st;
		if (!gpunvme_fs_stat(fs, i, &st))
			gpunvme_fs_pread(fs, i, buf, 256, 0);
	}
	gpunvme_fs_close(fs);
	return 0;
}
