/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Linux md arrays (software RAID) read from their member devices with no
 * kernel md driver: the superblocks (metadata 1.2 at 4 KiB, 1.1 at byte 0,
 * 1.0 and 0.90 at the end of the member) are decoded, RAID0 (one zone or
 * several, for members of different sizes) and linear arrays are assembled,
 * and every array byte maps to one member and a byte offset on it. The
 * array is itself a block source (gpunvme_blkdev), so the ext4/XFS decoders
 * and file extents work on it; a file's extents split into per-member runs.
 *
 * Anything else is refused with a message naming the reason: other RAID
 * levels (1/4/5/6/10: their bytes are not a plain concatenation of member
 * chunks), a reshape in progress, a missing, stale, faulty or spare member,
 * members of different arrays, an unknown metadata version or feature, a
 * multi-zone RAID0 whose layout was never recorded.
 */
#ifndef GPUNVME_MD_H
#define GPUNVME_MD_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPUNVME_MD_MAX_MEMBERS 64
#define GPUNVME_MD_LEVEL_LINEAR (-1)

/* What one member's superblock says (gpunvme_md_examine). */
struct gpunvme_md_super {
	char version[8];          /* "1.2", "1.1", "1.0", "0.90" */
	uint8_t uuid[16];         /* the array's */
	char name[33];            /* v1 set_name ("" for 0.90) */
	int32_t level;            /* 0, 1, 4, 5, 6, 10, -1 linear, ... */
	uint32_t layout;
	uint32_t chunk_bytes;
	uint32_t raid_disks;
	int32_t slot;             /* role in the array, -1 spare, -2 faulty, -3 journal */
	uint64_t events;
	uint64_t super_offset;    /* bytes */
	uint64_t data_offset;     /* bytes */
	uint64_t data_bytes;      /* member bytes the array uses (before chunk rounding) */
	uint32_t feature_map;     /* v1 feature bits; 0.90: 0 */
	int reshaping;            /* 1 when a reshape is in progress */
	int layout_recorded;      /* v1 RAID0 with MD_FEATURE_RAID0_LAYOUT, else 0 */
};

/* The superblock of one member: 0, or -EINVAL "no md superblock" (when
 * none of the four places holds one), -EUCLEAN for a bad checksum or
 * inconsistent fields, -ENOTSUP for an unknown major/minor version. */
int gpunvme_md_examine(const struct gpunvme_blkdev *dev, struct gpunvme_md_super *sb);

struct gpunvme_md;

/*
 * Assemble an array from its members, given in any order (the superblocks
 * say each one's slot). The member block sources are borrowed: keep them
 * open until gpunvme_md_close. `names` (may be NULL) label members in
 * messages ("emu:/a.img"). RAID0 and linear only; see the header comment
 * for what is refused (-ENOTSUP, -EINVAL, -ENODEV for a missing member).
 */
int gpunvme_md_assemble(const struct gpunvme_blkdev *members, const char *const *names, size_t n,
			struct gpunvme_md **out);
void gpunvme_md_close(struct gpunvme_md *md);

struct gpunvme_md_info {
	char version[8];
	uint8_t uuid[16];
	char name[33];
	int32_t level;            /* 0 or GPUNVME_MD_LEVEL_LINEAR */
	uint32_t layout;          /* RAID0: 1 original, 2 alternate (multi-zone), else 0 */
	uint32_t chunk_bytes;     /* RAID0 chunk; linear: rounding (0 none) */
	uint32_t n_members;
	uint32_t zones;           /* RAID0 strip zones (1 when members are alike) */
	uint64_t size;            /* array bytes */
	uint32_t lba_size;        /* the members' largest block size */
};
void gpunvme_md_info(const struct gpunvme_md *md, struct gpunvme_md_info *info);

/* Member (index into the array passed to assemble) of slot `slot`, its
 * data offset and the bytes it contributes. */
int gpunvme_md_member(const struct gpunvme_md *md, uint32_t slot, uint32_t *member, uint64_t *data_offset,
		      uint64_t *bytes);

/* Array byte `off` -> member index (as passed to assemble) and byte offset
 * on that member (data offset included); *contig gets the bytes that stay
 * on that member contiguously (to the end of the chunk, zone or member).
 * -ERANGE past the end of the array. */
int gpunvme_md_map(const struct gpunvme_md *md, uint64_t off, uint32_t *member, uint64_t *member_off,
		   uint64_t *contig);

/* The array as a block source (reads split across members); valid until
 * gpunvme_md_close, its close is a no-op. */
void gpunvme_md_blkdev(struct gpunvme_md *md, struct gpunvme_blkdev *out);

/* One piece of a file on one member. */
struct gpunvme_md_extent {
	uint64_t logical;         /* file byte */
	uint64_t physical;        /* byte on the member (data offset included) */
	uint64_t length;
	uint32_t flags;           /* GPUNVME_EXTENT_UNWRITTEN as in the array extent */
	uint32_t member;          /* index as passed to assemble */
};

/* A file's array extents (gpunvme_fs_extents on the array) split into
 * per-member pieces, sorted by logical offset. *out is malloc'ed. */
int gpunvme_md_split_extents(const struct gpunvme_md *md, const struct gpunvme_extent *ext, size_t n,
			     struct gpunvme_md_extent **out, size_t *nout);

/*
 * The extent table member `member` needs to load its part of the file:
 * its pieces as ordinary extents (physical = byte on the member), pieces of
 * other members as GPUNVME_EXTENT_ELSEWHERE (the loader leaves those bytes
 * alone), and the file's holes and unwritten ranges as they are for member
 * 0 but ELSEWHERE for the others, so exactly one member zero-fills them.
 * Sorted, covering [0, file_size). *out is malloc'ed.
 */
int gpunvme_md_member_extents(const struct gpunvme_md *md, const struct gpunvme_extent *ext, size_t n,
			      uint64_t file_size, uint32_t member, struct gpunvme_extent **out, size_t *nout);

/* ---- md: URIs ------------------------------------------------------------ */

/*
 * An array named by a URI "md:MEMBER;MEMBER;...": each member a controller
 * URI (emu:, vfio:, uio:, pci:) with an optional "#N" for namespace N
 * (default `nsid`). Members whose controller URI is the same text are
 * namespaces of one controller (opened once); every other member URI is a
 * controller of its own (an emu: URI its own emulated controller with its
 * own workers and device model). Each member gets a namespace reader; the
 * array is assembled and `array` reads it. -EINVAL for bad syntax.
 * opts->nr_io_queues is per member: a controller that serves k members is
 * asked for k times as many (each member's loader takes its own queues).
 */
struct gpunvme_md_volume {
	size_t n;
	struct gpunvme_ctrl *c[GPUNVME_MD_MAX_MEMBERS];     /* per member (shared ones repeat) */
	uint32_t nsid[GPUNVME_MD_MAX_MEMBERS];
	struct gpunvme_blkdev dev[GPUNVME_MD_MAX_MEMBERS];  /* namespace readers */
	char *name[GPUNVME_MD_MAX_MEMBERS];                 /* the member URIs as given */
	struct gpunvme_ctrl *owned[GPUNVME_MD_MAX_MEMBERS]; /* distinct controllers */
	size_t nowned;
	struct gpunvme_md *md;
	struct gpunvme_blkdev array;
};

/* 1 when uri starts with "md:" */
int gpunvme_md_uri(const char *uri);
/* Syntax only, no device touched: 0 or -EINVAL with the reason. */
int gpunvme_md_uri_check(const char *uri);
int gpunvme_md_open(const char *uri, const struct gpunvme_opts *opts, uint32_t nsid, struct gpunvme_md_volume **out);
void gpunvme_md_volume_close(struct gpunvme_md_volume *v);

#ifdef __cplusplus
}
#endif

#endif
