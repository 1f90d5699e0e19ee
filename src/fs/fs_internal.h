/* SPDX-License-Identifier: BSD-2-Clause */
/* File system decoders (src/fs): the backend interface. fs.c probes,
 * dispatches and implements what is common (path lookup, reads through
 * extents, offset translation); ext4.c and xfs.c decode on-disk formats. */
#ifndef GPUNVME_FS_INTERNAL_H
#define GPUNVME_FS_INTERNAL_H

#include "gpunvme/extents.h"

struct gpunvme_fs;

struct gpunvme_fs_ops {
	const char *name;
	/* 1 when the superblock at the start of the file system is ours */
	int (*probe)(struct gpunvme_fs *fs);
	/* read and check the superblock, set fs->block_size, fs->root_ino */
	int (*mount)(struct gpunvme_fs *fs);
	void (*unmount)(struct gpunvme_fs *fs);
	int (*stat)(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_stat *st);
	int (*readdir)(struct gpunvme_fs *fs, uint64_t ino, gpunvme_dirent_cb cb, void *arg);
	/* extents in file-system-relative bytes (fs.c adds part_off) */
	int (*extents)(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_extent **ext, size_t *n);
	/* optional: symlink target or inline file data (ext4 inline data) */
	int64_t (*read_inline)(struct gpunvme_fs *fs, uint64_t ino, void *buf, size_t len, uint64_t off);
};

struct gpunvme_fs {
	const struct gpunvme_fs_ops *ops;
	struct gpunvme_blkdev dev;
	uint64_t part_off;     /* byte offset of the file system on dev */
	uint64_t size;         /* bytes from part_off to the end of dev */
	uint32_t block_size;
	uint64_t root_ino;
	void *priv;            /* the backend's state */
};

/* Read len bytes at file-system-relative byte offset off; -EIO (with a
 * message) when the range is outside the device: every on-disk pointer goes
 * through here, so a corrupt pointer cannot read out of bounds. */
int fs_read(struct gpunvme_fs *fs, uint64_t off, void *buf, size_t len);

/* 1 when an ext4 or XFS superblock is at byte `off` of dev (*type gets
 * "ext4"/"xfs"), 0 when not; only the probes run, nothing is mounted. */
int fs_probe_at(const struct gpunvme_blkdev *dev, uint64_t off, const char **type);

/* A growable extent array for backends. */
struct fs_extents {
	struct gpunvme_extent *v;
	size_t n, cap;
};
int fs_extents_push(struct fs_extents *e, uint64_t logical, uint64_t physical, uint64_t length, uint32_t flags);
/* sort by logical offset, merge adjacent, reject overlaps (-EUCLEAN) */
int fs_extents_finish(struct fs_extents *e);

extern const struct gpunvme_fs_ops gpunvme_fs_ext4;
extern const struct gpunvme_fs_ops gpunvme_fs_xfs;

#endif
