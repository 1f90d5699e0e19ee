/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * File extents: where a file's bytes live on a namespace, resolved on the
 * host ahead of time so that GPU code can turn file offsets into LBAs.
 * Two ways: FIEMAP on a mounted file system, and decoding XFS or ext4
 * on-disk metadata directly from a block source (a namespace owned by the
 * user-space driver, or an image file) with no mount at all.
 *
 * Every on-disk number is bounds-checked before use; a corrupt or hostile
 * image gives an error (-EUCLEAN for a checksum mismatch, -EFSCORRUPTED style
 * -EUCLEAN/-EIO for inconsistent metadata), never a crash or a hang.
 */
#ifndef GPUNVME_EXTENTS_H
#define GPUNVME_EXTENTS_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/gpunvme.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- block sources ---------------------------------------------------------- */

struct gpunvme_blkdev {
	/* read len bytes at byte offset off; 0 or -errno (-EIO past the end) */
	int (*read)(void *ctx, uint64_t off, void *buf, size_t len);
	void (*close)(void *ctx);
	void *ctx;
	uint64_t size;        /* bytes */
	uint32_t lba_size;    /* the device's block size (512 for image files) */
	/* optional: give back what reads hold between calls (a namespace
	 * reader's I/O queue pair); the next read takes it again */
	void (*release)(void *ctx);
};

/* An image file, read with pread. */
int gpunvme_blkdev_open_file(const char *path, struct gpunvme_blkdev *out);
/* A namespace through the user-space driver (its own queue pair). */
int gpunvme_blkdev_open_ns(struct gpunvme_ctrl *c, uint32_t nsid, struct gpunvme_blkdev *out);
/* Calls b->release where there is one: a namespace reader gives its queue
 * pair back to the controller until its next read. */
void gpunvme_blkdev_release(struct gpunvme_blkdev *b);
void gpunvme_blkdev_close(struct gpunvme_blkdev *b);

/* ---- file systems --------------------------------------------------------- */

struct gpunvme_fs;

/* Probe ext4 (also ext2/3) or XFS at byte offset `part_off` of the device
 * (0 for a whole-namespace file system). -EINVAL "no file system" when
 * neither superblock is found. */
int gpunvme_fs_open(const struct gpunvme_blkdev *dev, uint64_t part_off, struct gpunvme_fs **out);
void gpunvme_fs_close(struct gpunvme_fs *fs);
const char *gpunvme_fs_type(const struct gpunvme_fs *fs);  /* "ext4", "xfs" */
uint32_t gpunvme_fs_block_size(const struct gpunvme_fs *fs);

enum {
	GPUNVME_FT_UNKNOWN = 0,
	GPUNVME_FT_REG = 1,
	GPUNVME_FT_DIR = 2,
	GPUNVME_FT_SYMLINK = 7,
	GPUNVME_FT_OTHER = 8,
};

struct gpunvme_stat {
	uint64_t ino;
	uint32_t mode;        /* as st_mode */
	uint32_t nlink;
	uint32_t uid, gid;
	uint64_t size;        /* bytes */
	uint64_t blocks;      /* bytes allocated on disk */
	int64_t mtime_sec;
	uint32_t mtime_nsec;
};

/* Path lookup from the root ("/a/b", "a/b"), following symbolic links as
 * path_resolution(7) does: in every component, the last one included. A
 * relative target resolves from the directory holding the link, an absolute
 * one from this file system's root (never the host's); ".." is the
 * directory's real parent (the root's is the root). -ENOENT (a dangling
 * link names the link and its target), -ENOTDIR, -ELOOP (more than 40
 * links followed: a symlink loop), -ENAMETOOLONG. */
int gpunvme_fs_lookup(struct gpunvme_fs *fs, const char *path, uint64_t *ino);
/* The same, but a symbolic link in the last component is not followed (its
 * own inode, as lstat(2)); a trailing slash still follows it. */
int gpunvme_fs_lookup_nofollow(struct gpunvme_fs *fs, const char *path, uint64_t *ino);
/* The target of symbolic link `ino` (ext4 fast and slow links, XFS local and
 * extent format) into buf, NUL-terminated; returns its length. -EINVAL when
 * ino is not a symlink, -ENAMETOOLONG when target + NUL do not fit len. */
int64_t gpunvme_fs_readlink(struct gpunvme_fs *fs, uint64_t ino, char *buf, size_t len);
int gpunvme_fs_stat(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_stat *st);

/* Directory entries ("." and ".." included as the file system stores
 * them). The callback returns 0 to go on, non-zero to stop (returned). */
typedef int (*gpunvme_dirent_cb)(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype);
int gpunvme_fs_readdir(struct gpunvme_fs *fs, uint64_t ino, gpunvme_dirent_cb cb, void *arg);

#define GPUNVME_EXTENT_UNWRITTEN 0x1u  /* allocated, reads as zeroes */
/* Bytes another device supplies (one member's view of a file on an md
 * array, gpunvme_md_member_extents): lookups treat them as unmapped and the
 * layer loader leaves them alone (neither read nor zeroed). */
#define GPUNVME_EXTENT_ELSEWHERE 0x2u

/* One mapping; byte units. `physical` is relative to the start of the
 * device (partition offset included), so physical / lba_size is an LBA. */
struct gpunvme_extent {
	uint64_t logical;
	uint64_t physical;
	uint64_t length;
	uint32_t flags;
};

/* A file's extents sorted by logical offset, holes implied. *ext is
 * malloc'ed (free() it). Regular files only. */
int gpunvme_fs_extents(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_extent **ext, size_t *n);

/* File bytes [off, off + len) through the extents: holes and unwritten
 * ranges read as zeroes; reads past EOF are short. Returns bytes read. */
int64_t gpunvme_fs_pread(struct gpunvme_fs *fs, uint64_t ino, void *buf, size_t len, uint64_t off);

/* ---- FIEMAP (mounted files) -------------------------------------------------- */

/* Extents of a file on a mounted file system, physical offsets made
 * relative to the whole disk (partition start added from sysfs). *dev gets
 * the disk's kernel name (e.g. "nvme0n1"); -ENOTSUP when the file system
 * has no FIEMAP, -EXDEV when the file is not on an NVMe namespace. */
int gpunvme_fiemap(const char *path, struct gpunvme_extent **ext, size_t *n, char *dev, size_t devlen);

/* ---- lookup tables ---------------------------------------------------------- */

/* Offset -> (byte address on the device) for a sorted extent list; -1 for a
 * hole or unwritten range; *contig (may be NULL) gets the bytes until the
 * mapping changes (0 past the last extent). Binary search. The inline
 * version is the same code for host and CUDA device functions, so a kernel
 * can turn file offsets into LBAs from the table it was handed. */
GPUNVME_HD int64_t gpunvme_extent_lookup(const struct gpunvme_extent *ext, size_t n, uint64_t off, uint64_t *contig)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ext[mid].logical <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0) {
		const struct gpunvme_extent *x = &ext[lo - 1];
		if (off < x->logical + x->length && !(x->flags & (GPUNVME_EXTENT_UNWRITTEN | GPUNVME_EXTENT_ELSEWHERE))) {
			if (contig)
				*contig = x->logical + x->length - off;
			return (int64_t)(x->physical + (off - x->logical));
		}
		if (off < x->logical + x->length) { /* unwritten or elsewhere: up to its end */
			if (contig)
				*contig = x->logical + x->length - off;
			return -1;
		}
	}
	if (contig)
		*contig = lo < n ? ext[lo].logical - off : 0;
	return -1;
}

#if !defined(__CUDA_ARCH__)
int64_t gpunvme_extent_map(const struct gpunvme_extent *ext, size_t n, uint64_t off, uint64_t *contig);
#endif

#ifdef __cplusplus
}
#endif

#endif
