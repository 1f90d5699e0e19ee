/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ext2/ext3/ext4 on-disk metadata decoder: superblock, group descriptors,
 * inode tables, extent trees, ext2/3 indirect block maps, linear and htree
 * directories, inline data, symlinks, metadata checksums.
 *
 * Section names in the comments refer to the kernel's "ext4 Data Structures
 * and Algorithms" document (Documentation/filesystems/ext4/ in the Linux tree).
 *
 * Every on-disk number is checked before it is used, all reads go through
 * fs_read() (which refuses anything outside the device), tree walks are
 * bounded (extent depth <= 5, a block budget of the file system's block
 * count, strictly increasing logical offsets), so a corrupt image gives an
 * error (-EUCLEAN, -EIO, -ENOTSUP) with one line of explanation.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fs/fs_internal.h"

/* ---- constants ("The Super Block", "Inode Table", "Extent Tree") -------- */

#define E4_SB_OFF            1024u
#define E4_SB_SIZE           1024u
#define E4_MAGIC             0xEF53u
#define E4_EXT_MAGIC         0xF30Au
#define E4_EXT_MAX_DEPTH     5u
#define E4_GOOD_OLD_INODE    128u
#define E4_N_BLOCKS          15u
#define E4_IBLOCK_OFF        0x28u
#define E4_IBLOCK_SIZE       60u
#define E4_ROOT_INO          2u

#define COMPAT_SPARSE_SUPER2 0x0200u

#define INCOMPAT_COMPRESSION 0x0001u
#define INCOMPAT_FILETYPE    0x0002u
#define INCOMPAT_RECOVER     0x0004u
#define INCOMPAT_JOURNAL_DEV 0x0008u
#define INCOMPAT_META_BG     0x0010u
#define INCOMPAT_EXTENTS     0x0040u
#define INCOMPAT_64BIT       0x0080u
#define INCOMPAT_MMP         0x0100u
#define INCOMPAT_FLEX_BG     0x0200u
#define INCOMPAT_EA_INODE    0x0400u
#define INCOMPAT_DIRDATA     0x1000u
#define INCOMPAT_CSUM_SEED   0x2000u
#define INCOMPAT_LARGEDIR    0x4000u
#define INCOMPAT_INLINE_DATA 0x8000u
#define INCOMPAT_ENCRYPT     0x10000u
#define INCOMPAT_CASEFOLD    0x20000u
/* What this decoder understands; anything else is refused by name. */
#define INCOMPAT_SUPPORTED                                                                          \
	(INCOMPAT_FILETYPE | INCOMPAT_RECOVER | INCOMPAT_META_BG | INCOMPAT_EXTENTS | INCOMPAT_64BIT | \
	 INCOMPAT_MMP | INCOMPAT_FLEX_BG | INCOMPAT_EA_INODE | INCOMPAT_CSUM_SEED | INCOMPAT_LARGEDIR | \
	 INCOMPAT_INLINE_DATA | INCOMPAT_ENCRYPT | INCOMPAT_CASEFOLD)

#define RO_COMPAT_SPARSE_SUPER  0x0001u
#define RO_COMPAT_HUGE_FILE     0x0008u
#define RO_COMPAT_GDT_CSUM      0x0010u
#define RO_COMPAT_DIR_NLINK     0x0020u
#define RO_COMPAT_BIGALLOC      0x0200u
#define RO_COMPAT_METADATA_CSUM 0x0400u

/* i_flags ("Inode Table", i_flags) */
#define E4_INDEX_FL       0x00001000u
#define E4_ENCRYPT_FL     0x00000800u
#define E4_HUGE_FILE_FL   0x00040000u
#define E4_EXTENTS_FL     0x00080000u
#define E4_EA_INODE_FL    0x00200000u
#define E4_INLINE_DATA_FL 0x10000000u

/* bg_flags ("Block Group Descriptors") */
#define BG_INODE_UNINIT 0x0001u

#define S_IFMT_  0170000u
#define S_IFREG_ 0100000u
#define S_IFDIR_ 0040000u
#define S_IFLNK_ 0120000u

/* ---- little-endian accessors ------------------------------------------- */

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- checksums ("Checksums") --------------------------------------------- */

/* CRC32C: the library's (src/base), in the kernel's crc32c() form: no pre-
 * or post-inversion, callers pass the seed. */
static uint16_t crc16_tab[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint16_t d = (uint16_t)i;
		for (int k = 0; k < 8; k++)
			d = (uint16_t)((d & 1) ? (d >> 1) ^ 0xA001u : d >> 1);
		crc16_tab[i] = d;
	}
}

static uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
	return gpunvme_crc32c_raw(crc, buf, len);
}

/* CRC16 (ANSI, reflected 0xA001) for the older uninit_bg (gdt_csum)
 * group descriptor checksums. */
static uint16_t crc16(uint16_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len--)
		crc = (uint16_t)(crc16_tab[(crc ^ *p++) & 0xff] ^ (crc >> 8));
	return crc;
}

static uint32_t crc32c_le32(uint32_t crc, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
	return crc32c(crc, b, 4);
}

/* ---- state --------------------------------------------------------------- */

struct e4_group {
	uint64_t inode_table;   /* first block of the group's inode table */
	uint32_t inodes_used;   /* inodes at the start of the table that may be in use */
};

struct e4 {
	uint64_t blocks_count;
	uint32_t inodes_count;
	uint32_t first_data_block;
	uint32_t blocks_per_group;
	uint32_t inodes_per_group;
	uint32_t inode_size;
	uint32_t desc_size;
	uint32_t ngroups;
	uint32_t incompat, ro_compat, compat;
	uint32_t first_meta_bg;
	uint32_t backup_bgs[2];
	uint32_t itb_per_group; /* inode table blocks per group */
	uint32_t csum_seed;
	bool csum;              /* metadata_csum */
	uint8_t uuid[16];
	struct e4_group *groups;
	/* the last inode table block read: stat of many inodes in a row
	 * (indexing a whole tree) costs one read per block, not per inode */
	pthread_mutex_t lock;
	uint64_t cache_blk;
	bool cache_valid;
	uint8_t *cache;
};

/* A decoded inode: the fields this decoder uses, plus the raw bytes. */
struct e4_inode {
	uint64_t ino;
	uint32_t mode, flags, nlink, uid, gid, generation;
	uint64_t size, blocks_bytes, file_acl;
	int64_t mtime;
	uint32_t mtime_nsec;
	uint32_t extra_isize;
	uint32_t csum_seed;     /* per-inode checksum seed (extent/dir blocks) */
	uint8_t iblock[E4_IBLOCK_SIZE];
	uint8_t raw[1024];      /* inode_size bytes (at most 1024 are kept) */
	uint32_t raw_len;
};

static struct e4 *E(struct gpunvme_fs *fs) { return fs->priv; }

#define CORRUPT(fmt, ...) gpunvme_set_error(-EUCLEAN, "ext4: " fmt, ##__VA_ARGS__)

/* ---- superblock ("The Super Block") ------------------------------------- */

static int e4_probe(struct gpunvme_fs *fs)
{
	uint8_t m[2];
	if (fs->size < E4_SB_OFF + E4_SB_SIZE)
		return 0;
	if (fs_read(fs, E4_SB_OFF + 0x38, m, 2))
		return 0;
	return le16(m) == E4_MAGIC;
}

static int is_pow(uint32_t v, uint32_t base)
{
	while (v > 1 && v % base == 0)
		v /= base;
	return v == 1;
}

/* "Block Groups", sparse_super / sparse_super2: groups holding a superblock
 * backup (and, with meta_bg, a descriptor block). */
static bool group_has_super(const struct e4 *e, uint32_t g)
{
	if (g == 0)
		return true;
	if (e->compat & COMPAT_SPARSE_SUPER2)
		return g == e->backup_bgs[0] || g == e->backup_bgs[1];
	if (g <= 1 || !(e->ro_compat & RO_COMPAT_SPARSE_SUPER))
		return true;
	if (!(g & 1))
		return false;
	return is_pow(g, 3) || is_pow(g, 5) || is_pow(g, 7);
}

/* Block holding group descriptor block `nr` ("Meta Block Groups"). */
static uint64_t desc_block(const struct e4 *e, uint32_t bs, uint32_t nr)
{
	uint64_t sb_blk = bs == 1024 ? 1 : 0;
	if (!(e->incompat & INCOMPAT_META_BG) || nr < e->first_meta_bg)
		return sb_blk + nr + 1;
	uint32_t per = bs / e->desc_size;
	uint64_t g = (uint64_t)per * nr;
	if (g >= e->ngroups)
		return UINT64_MAX;
	uint64_t has = group_has_super(e, (uint32_t)g) ? 1 : 0;
	if (bs == 1024 && nr == 0 && e->first_data_block == 0)
		has++;
	return (uint64_t)e->first_data_block + g * e->blocks_per_group + has;
}

static void incompat_names(uint32_t bits, char *out, size_t len)
{
	static const struct { uint32_t bit; const char *name; } names[] = {
		{ INCOMPAT_COMPRESSION, "compression" }, { INCOMPAT_JOURNAL_DEV, "journal_dev" },
		{ 0x0020u, "unknown(0x20)" },           { 0x0800u, "unknown(0x800)" },
		{ INCOMPAT_DIRDATA, "dirdata" },
	};
	out[0] = 0;
	size_t o = 0;
	for (int b = 0; b < 32; b++) {
		uint32_t bit = 1u << b;
		if (!(bits & bit))
			continue;
		const char *n = NULL;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (names[i].bit == bit)
				n = names[i].name;
		int w = n ? snprintf(out + o, len - o, "%s%s", o ? " " : "", n)
			  : snprintf(out + o, len - o, "%sunknown(0x%x)", o ? " " : "", bit);
		if (w < 0 || (size_t)w >= len - o)
			break;
		o += (size_t)w;
	}
}

static int load_groups(struct gpunvme_fs *fs, struct e4 *e)
{
	uint32_t bs = fs->block_size;
	uint32_t per = bs / e->desc_size;
	uint32_t nblk = (e->ngroups + per - 1) / per;
	e->groups = calloc(e->ngroups, sizeof(*e->groups));
	uint8_t *buf = malloc(bs);
	int rc = 0;
	if (!e->groups || !buf) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t b = 0; b < nblk; b++) {
		uint64_t blk = desc_block(e, bs, b);
		if (blk >= e->blocks_count) {
			rc = CORRUPT("group descriptor block %u is at block %llu, past the end (%llu blocks)", b,
				     (unsigned long long)blk, (unsigned long long)e->blocks_count);
			goto out;
		}
		if ((rc = fs_read(fs, blk * bs, buf, bs)))
			goto out;
		for (uint32_t i = 0; i < per && (uint64_t)b * per + i < e->ngroups; i++) {
			uint32_t g = b * per + i;
			uint8_t *d = buf + (size_t)i * e->desc_size;
			uint16_t stored = le16(d + 0x1E);
			/* "Block Group Descriptors", bg_checksum: crc32c(seed,
			 * group, desc with bg_checksum zeroed) & 0xFFFF with
			 * metadata_csum; crc16(~0, uuid, group, desc) with gdt_csum */
			if (e->csum) {
				uint16_t zero = 0;
				uint32_t c = crc32c_le32(e->csum_seed, g);
				c = crc32c(c, d, 0x1E);
				c = crc32c(c, &zero, 2);
				c = crc32c(c, d + 0x20, e->desc_size - 0x20);
				if ((uint16_t)c != stored) {
					rc = gpunvme_set_error(-EUCLEAN,
							       "ext4: group descriptor %u checksum mismatch (stored 0x%04x, computed 0x%04x)",
							       g, stored, (uint16_t)c);
					goto out;
				}
			} else if (e->ro_compat & RO_COMPAT_GDT_CSUM) {
				uint8_t gl[4] = { (uint8_t)g, (uint8_t)(g >> 8), (uint8_t)(g >> 16), (uint8_t)(g >> 24) };
				uint16_t c = crc16(0xFFFF, e->uuid, 16);
				c = crc16(c, gl, 4);
				c = crc16(c, d, 0x1E);
				if ((e->incompat & INCOMPAT_64BIT) && e->desc_size > 0x20)
					c = crc16(c, d + 0x20, e->desc_size - 0x20);
				if (c != stored) {
					rc = gpunvme_set_error(-EUCLEAN,
							       "ext4: group descriptor %u checksum (gdt_csum) mismatch (stored 0x%04x, computed 0x%04x)",
							       g, stored, c);
					goto out;
				}
			}
			uint64_t it = le32(d + 0x08);
			uint32_t unused = le16(d + 0x1C);
			uint16_t flags = le16(d + 0x12);
			if (e->desc_size >= 64) {
				it |= (uint64_t)le32(d + 0x28) << 32;
				unused |= (uint32_t)le16(d + 0x32) << 16;
			}
			/* flex_bg lets the table live anywhere: check only that it
			 * is inside the file system */
			if (it < e->first_data_block || it > e->blocks_count || e->blocks_count - it < e->itb_per_group) {
				rc = CORRUPT("group %u: inode table at block %llu (%u blocks) is outside the file system (%llu blocks)",
					     g, (unsigned long long)it, e->itb_per_group,
					     (unsigned long long)e->blocks_count);
				goto out;
			}
			e->groups[g].inode_table = it;
			e->groups[g].inodes_used = e->inodes_per_group;
			/* with group checksums, bg_itable_unused and INODE_UNINIT
			 * are trustworthy: inodes past them were never written */
			if (e->csum || (e->ro_compat & RO_COMPAT_GDT_CSUM)) {
				if (flags & BG_INODE_UNINIT)
					e->groups[g].inodes_used = 0;
				else if (unused <= e->inodes_per_group)
					e->groups[g].inodes_used = e->inodes_per_group - unused;
			}
		}
	}
out:
	free(buf);
	return rc;
}

static void e4_unmount(struct gpunvme_fs *fs)
{
	struct e4 *e = E(fs);
	if (!e)
		return;
	pthread_mutex_destroy(&e->lock);
	free(e->groups);
	free(e->cache);
	free(e);
	fs->priv = NULL;
}

static int e4_mount(struct gpunvme_fs *fs)
{
	pthread_once(&crc_once, crc_init);
	uint8_t sb[E4_SB_SIZE];
	int rc = fs_read(fs, E4_SB_OFF, sb, sizeof(sb));
	if (rc)
		return rc;
	if (le16(sb + 0x38) != E4_MAGIC)
		return gpunvme_set_error(-EINVAL, "ext4: bad superblock magic 0x%04x", le16(sb + 0x38));
	struct e4 *e = calloc(1, sizeof(*e));
	if (!e)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	pthread_mutex_init(&e->lock, NULL);
	fs->priv = e;

	uint32_t rev = le32(sb + 0x4C);
	uint32_t log_bs = le32(sb + 0x18);
	e->inodes_count = le32(sb + 0x00);
	e->blocks_count = le32(sb + 0x04);
	e->first_data_block = le32(sb + 0x14);
	e->blocks_per_group = le32(sb + 0x20);
	e->inodes_per_group = le32(sb + 0x28);
	if (rev >= 1) {
		e->compat = le32(sb + 0x5C);
		e->incompat = le32(sb + 0x60);
		e->ro_compat = le32(sb + 0x64);
		e->inode_size = le16(sb + 0x58);
	} else {
		e->inode_size = E4_GOOD_OLD_INODE;
	}
	memcpy(e->uuid, sb + 0x68, 16);
	e->first_meta_bg = le32(sb + 0x104);
	e->backup_bgs[0] = le32(sb + 0x24C);
	e->backup_bgs[1] = le32(sb + 0x250);
	e->csum = (e->ro_compat & RO_COMPAT_METADATA_CSUM) != 0;

	if (e->csum) {
		/* "The Super Block", s_checksum: crc32c(~0, sb up to it) */
		uint32_t c = crc32c(~0u, sb, 0x3FC);
		if (sb[0x175] != 1) {
			rc = gpunvme_set_error(-ENOTSUP, "ext4: unknown metadata checksum type %u", sb[0x175]);
			goto fail;
		}
		if (c != le32(sb + 0x3FC)) {
			rc = gpunvme_set_error(-EUCLEAN, "ext4: superblock checksum mismatch (stored 0x%08x, computed 0x%08x)",
					       le32(sb + 0x3FC), c);
			goto fail;
		}
		e->csum_seed = (e->incompat & INCOMPAT_CSUM_SEED) ? le32(sb + 0x270) : crc32c(~0u, e->uuid, 16);
	}
	if (rev > 1) {
		rc = gpunvme_set_error(-ENOTSUP, "ext4: unknown revision level %u", rev);
		goto fail;
	}
	if (e->incompat & ~INCOMPAT_SUPPORTED) {
		char names[256];
		incompat_names(e->incompat & ~INCOMPAT_SUPPORTED, names, sizeof(names));
		rc = gpunvme_set_error(-ENOTSUP, "ext4: unsupported incompatible features: %s", names);
		goto fail;
	}
	if (log_bs > 6) {
		rc = CORRUPT("block size 2^(10+%u) is outside 1 KiB..64 KiB", log_bs);
		goto fail;
	}
	uint32_t bs = 1024u << log_bs;
	fs->block_size = bs;
	if (e->incompat & INCOMPAT_64BIT) {
		e->blocks_count |= (uint64_t)le32(sb + 0x150) << 32;
		e->desc_size = le16(sb + 0xFE);
		if (e->desc_size < 64 || e->desc_size > 1024 || e->desc_size > bs || (e->desc_size & (e->desc_size - 1))) {
			rc = CORRUPT("64bit group descriptor size %u is not a power of two in 64..1024", e->desc_size);
			goto fail;
		}
	} else {
		e->desc_size = 32;
	}
	if (e->blocks_count == 0 || e->blocks_count > fs->size / bs) {
		rc = CORRUPT("block count %llu (of %u bytes) does not fit the device (%llu bytes)",
			     (unsigned long long)e->blocks_count, bs, (unsigned long long)fs->size);
		goto fail;
	}
	if (e->first_data_block > (bs == 1024 ? 1u : 0u) || e->first_data_block >= e->blocks_count) {
		rc = CORRUPT("first data block %u is wrong for %u-byte blocks", e->first_data_block, bs);
		goto fail;
	}
	/* bigalloc: blocks_per_group = clusters_per_group * blocks per cluster,
	 * the bitmap (one block) still bounds clusters per group */
	uint64_t max_bpg = 8ull * bs;
	if (e->ro_compat & RO_COMPAT_BIGALLOC) {
		uint32_t log_cs = le32(sb + 0x1C);
		if (log_cs < log_bs || log_cs - log_bs > 16) {
			rc = CORRUPT("cluster size 2^(10+%u) is invalid for block size %u", log_cs, bs);
			goto fail;
		}
		max_bpg <<= log_cs - log_bs;
	}
	/* mke2fs makes groups a multiple of 8 blocks (whole bitmap bytes) */
	if (e->blocks_per_group < 8 || e->blocks_per_group % 8 || e->blocks_per_group > max_bpg) {
		rc = CORRUPT("blocks per group %u is not a multiple of 8 in 8..%llu", e->blocks_per_group,
			     (unsigned long long)max_bpg);
		goto fail;
	}
	if (e->inodes_per_group == 0 || e->inodes_per_group > 8u * bs) {
		rc = CORRUPT("inodes per group %u is outside 1..%u", e->inodes_per_group, 8u * bs);
		goto fail;
	}
	if (e->inode_size < E4_GOOD_OLD_INODE || e->inode_size > bs || (e->inode_size & (e->inode_size - 1)) ||
	    e->inode_size > sizeof(((struct e4_inode *)0)->raw)) {
		rc = CORRUPT("inode size %u is not a power of two in 128..min(block size, 1024)", e->inode_size);
		goto fail;
	}
	uint64_t ng = (e->blocks_count - e->first_data_block + e->blocks_per_group - 1) / e->blocks_per_group;
	if (ng == 0 || ng > UINT32_MAX || (uint64_t)e->inodes_per_group * ng != e->inodes_count) {
		rc = CORRUPT("inode count %u is not inodes per group (%u) x groups (%llu)", e->inodes_count,
			     e->inodes_per_group, (unsigned long long)ng);
		goto fail;
	}
	/* the descriptor table must fit the device before it is allocated */
	if (ng * e->desc_size > fs->size) {
		rc = CORRUPT("%llu group descriptors do not fit the device", (unsigned long long)ng);
		goto fail;
	}
	if (e->inodes_per_group < bs / e->inode_size) {
		rc = CORRUPT("inodes per group %u is less than one block of inodes", e->inodes_per_group);
		goto fail;
	}
	e->ngroups = (uint32_t)ng;
	e->itb_per_group = (uint32_t)(((uint64_t)e->inodes_per_group * e->inode_size + bs - 1) / bs);
	if (e->inodes_count < E4_ROOT_INO) {
		rc = CORRUPT("inode count %u has no root inode", e->inodes_count);
		goto fail;
	}
	if (!(e->cache = malloc(bs))) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = load_groups(fs, e)))
		goto fail;
	fs->root_ino = E4_ROOT_INO;
	return 0;
fail:
	e4_unmount(fs);
	return rc;
}

/* ---- inodes ("Inode Table", "Finding an Inode") --------------------------- */

static int read_inode(struct gpunvme_fs *fs, uint64_t ino, struct e4_inode *in)
{
	struct e4 *e = E(fs);
	uint32_t bs = fs->block_size;
	if (ino == 0 || ino > e->inodes_count)
		return gpunvme_set_error(-ENOENT, "ext4: inode %llu is outside 1..%u", (unsigned long long)ino,
					 e->inodes_count);
	uint32_t g = (uint32_t)((ino - 1) / e->inodes_per_group);
	uint32_t idx = (uint32_t)((ino - 1) % e->inodes_per_group);
	if (idx >= e->groups[g].inodes_used)
		return gpunvme_set_error(-ENOENT, "ext4: inode %llu is not in use (past its group's initialized inodes)",
					 (unsigned long long)ino);
	uint64_t byte = (uint64_t)idx * e->inode_size;
	uint64_t blk = e->groups[g].inode_table + byte / bs;
	uint32_t off = (uint32_t)(byte % bs);
	uint32_t isz = e->inode_size;
	pthread_mutex_lock(&e->lock);
	int rc = 0;
	if (!e->cache_valid || e->cache_blk != blk) {
		e->cache_valid = false;
		rc = fs_read(fs, blk * bs, e->cache, bs);
		if (!rc) {
			e->cache_valid = true;
			e->cache_blk = blk;
		}
	}
	if (!rc)
		memcpy(in->raw, e->cache + off, isz);
	pthread_mutex_unlock(&e->lock);
	if (rc)
		return rc;
	const uint8_t *r = in->raw;
	in->raw_len = isz;
	in->ino = ino;

	bool zero = true;
	for (uint32_t i = 0; i < isz && zero; i++)
		zero = r[i] == 0;
	if (zero)
		return gpunvme_set_error(-ENOENT, "ext4: inode %llu is not in use", (unsigned long long)ino);

	in->extra_isize = 0;
	if (isz > E4_GOOD_OLD_INODE) {
		in->extra_isize = le16(r + 0x80);
		if (E4_GOOD_OLD_INODE + in->extra_isize > isz || (in->extra_isize & 3))
			return CORRUPT("inode %llu: i_extra_isize %u is invalid for %u-byte inodes",
				       (unsigned long long)ino, in->extra_isize, isz);
	}
	in->generation = le32(r + 0x64);
	if (e->csum) {
		/* "Inode Table", i_checksum_lo/hi: crc32c over the whole inode
		 * with both checksum fields zeroed, seeded with crc32c(fs seed,
		 * inode number, generation); only the low 16 bits when the
		 * inode has no room for i_checksum_hi */
		uint8_t tmp[1024];
		memcpy(tmp, r, isz);
		tmp[0x7C] = tmp[0x7D] = 0;
		bool hi = isz > E4_GOOD_OLD_INODE && in->extra_isize >= 4;
		if (hi)
			tmp[0x82] = tmp[0x83] = 0;
		uint32_t seed = crc32c_le32(crc32c_le32(e->csum_seed, (uint32_t)ino), in->generation);
		uint32_t c = crc32c(seed, tmp, isz);
		uint32_t stored = le16(r + 0x7C);
		if (hi)
			stored |= (uint32_t)le16(r + 0x82) << 16;
		else
			c &= 0xFFFF;
		if (c != stored)
			return gpunvme_set_error(-EUCLEAN, "ext4: inode %llu checksum mismatch (stored 0x%08x, computed 0x%08x)",
						 (unsigned long long)ino, stored, c);
		in->csum_seed = seed;
	}
	in->mode = le16(r + 0x00);
	in->nlink = le16(r + 0x1A);
	if (in->nlink == 0)
		return gpunvme_set_error(-ENOENT, "ext4: inode %llu is not in use (no links)", (unsigned long long)ino);
	in->uid = le16(r + 0x02) | ((uint32_t)le16(r + 0x78) << 16);
	in->gid = le16(r + 0x18) | ((uint32_t)le16(r + 0x7A) << 16);
	in->flags = le32(r + 0x20);
	in->size = le32(r + 0x04);
	/* i_size_high is i_dir_acl for directories unless largedir */
	if ((in->mode & S_IFMT_) == S_IFREG_ || (e->incompat & INCOMPAT_LARGEDIR) || (in->mode & S_IFMT_) != S_IFDIR_)
		in->size |= (uint64_t)le32(r + 0x6C) << 32;
	if (in->size >> 63)
		return CORRUPT("inode %llu: size %llu is negative", (unsigned long long)ino, (unsigned long long)in->size);
	/* i_blocks: 512-byte units; with huge_file 48 bits, and in file system
	 * blocks when the inode has EXT4_HUGE_FILE_FL */
	uint64_t blocks = le32(r + 0x1C);
	if (e->ro_compat & RO_COMPAT_HUGE_FILE) {
		blocks |= (uint64_t)le16(r + 0x74) << 32;
		in->blocks_bytes = (in->flags & E4_HUGE_FILE_FL) ? blocks * bs : blocks * 512;
	} else {
		in->blocks_bytes = blocks * 512;
	}
	in->file_acl = le32(r + 0x68) | ((uint64_t)le16(r + 0x76) << 32);
	/* "Inode Timestamps": 32-bit signed seconds, extended by the two
	 * epoch bits of i_mtime_extra (nanoseconds in the other 30) */
	in->mtime = (int32_t)le32(r + 0x10);
	in->mtime_nsec = 0;
	if (isz > E4_GOOD_OLD_INODE && in->extra_isize >= 0x8C - E4_GOOD_OLD_INODE) {
		uint32_t x = le32(r + 0x88);
		in->mtime += (int64_t)(x & 3) << 32;
		in->mtime_nsec = x >> 2;
	}
	memcpy(in->iblock, r + E4_IBLOCK_OFF, E4_IBLOCK_SIZE);
	if ((in->flags & E4_EXTENTS_FL) && !(e->incompat & INCOMPAT_EXTENTS) && !(in->flags & E4_INLINE_DATA_FL))
		return CORRUPT("inode %llu uses extents but the file system has no extent feature", (unsigned long long)ino);
	if ((in->flags & E4_INLINE_DATA_FL) && !(e->incompat & INCOMPAT_INLINE_DATA))
		return CORRUPT("inode %llu has inline data but the file system has no inline_data feature",
			       (unsigned long long)ino);
	return 0;
}

static int e4_stat(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_stat *st)
{
	struct e4_inode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	memset(st, 0, sizeof(*st));
	st->ino = ino;
	st->mode = in.mode;
	st->nlink = in.nlink;
	st->uid = in.uid;
	st->gid = in.gid;
	st->size = in.size;
	st->blocks = in.blocks_bytes;
	st->mtime_sec = in.mtime;
	st->mtime_nsec = in.mtime_nsec;
	return 0;
}

/* ---- block maps -------------------------------------------------------- */

struct walk {
	struct gpunvme_fs *fs;
	struct e4 *e;
	const struct e4_inode *in;
	struct fs_extents ext;
	uint64_t budget;        /* blocks (mapped + metadata) left: bounds any walk */
	uint64_t next_lblk;     /* extent trees: logical blocks strictly increase */
	uint8_t *buf[E4_EXT_MAX_DEPTH + 1];
};

static void walk_free(struct walk *w)
{
	for (size_t i = 0; i < sizeof(w->buf) / sizeof(w->buf[0]); i++)
		free(w->buf[i]);
	free(w->ext.v);
}

static int spend(struct walk *w, uint64_t n)
{
	if (n > w->budget)
		return CORRUPT("inode %llu maps more blocks than the file system has (a loop in its block map?)",
			       (unsigned long long)w->in->ino);
	w->budget -= n;
	return 0;
}

static int push_blocks(struct walk *w, uint64_t lblk, uint64_t pblk, uint64_t n, uint32_t flags)
{
	uint32_t bs = w->fs->block_size;
	/* merge with the previous run here: indirect maps give one block at a time */
	if (w->ext.n) {
		struct gpunvme_extent *p = &w->ext.v[w->ext.n - 1];
		if (p->flags == flags && p->logical + p->length == lblk * bs && p->physical + p->length == pblk * bs) {
			p->length += n * bs;
			return 0;
		}
	}
	int rc = fs_extents_push(&w->ext, lblk * bs, pblk * bs, n * bs, flags);
	return rc == -ENOMEM ? gpunvme_set_error(rc, "out of memory") : rc;
}

static bool blk_ok(const struct e4 *e, uint64_t pblk, uint64_t n)
{
	return pblk >= e->first_data_block && pblk < e->blocks_count && n <= e->blocks_count - pblk;
}

/* "Extent Tree": a 12-byte header, then eh_max entries of 12 bytes; in
 * blocks other than the root, a 4-byte ext4_extent_tail after eh_max entries
 * holding crc32c(inode seed, block up to the tail). */
static int ext_node(struct walk *w, const uint8_t *node, size_t room, uint32_t depth_expect, bool root,
		    uint64_t lo, uint64_t hi)
{
	const struct e4_inode *in = w->in;
	unsigned long long ino = (unsigned long long)in->ino;
	uint16_t magic = le16(node), entries = le16(node + 2), max = le16(node + 4), depth = le16(node + 6);
	if (magic != E4_EXT_MAGIC)
		return CORRUPT("inode %llu: extent header magic 0x%04x (expected 0xf30a)", ino, magic);
	if (depth > E4_EXT_MAX_DEPTH)
		return CORRUPT("inode %llu: extent tree depth %u is more than %u", ino, depth, E4_EXT_MAX_DEPTH);
	if (!root && depth != depth_expect)
		return CORRUPT("inode %llu: extent node depth %u where %u was expected", ino, depth, depth_expect);
	if (max == 0 || max > (room - 12) / 12 || entries > max)
		return CORRUPT("inode %llu: extent header has %u entries of at most %u (room for %zu)", ino, entries, max,
			       (room - 12) / 12);
	if (!root && entries == 0)
		return CORRUPT("inode %llu: empty extent node", ino);
	if (!root && w->e->csum) {
		size_t t = 12 + (size_t)max * 12;
		if (t + 4 > room)
			return CORRUPT("inode %llu: extent block has no room for its checksum", ino);
		uint32_t c = crc32c(in->csum_seed, node, t);
		if (c != le32(node + t))
			return gpunvme_set_error(-EUCLEAN,
						 "ext4: inode %llu: extent block checksum mismatch (stored 0x%08x, computed 0x%08x)",
						 ino, le32(node + t), c);
	}
	uint32_t bs = w->fs->block_size;
	for (uint32_t i = 0; i < entries; i++) {
		const uint8_t *x = node + 12 + (size_t)i * 12;
		uint64_t lblk = le32(x);
		if (lblk < lo || lblk >= hi || lblk < w->next_lblk)
			return CORRUPT("inode %llu: extent entry for logical block %llu is out of order", ino,
				       (unsigned long long)lblk);
		if (depth == 0) {
			uint32_t len = le16(x + 4);
			uint32_t flags = 0;
			uint64_t pblk = le32(x + 8) | ((uint64_t)le16(x + 6) << 32);
			/* ee_len > 32768: unwritten, length ee_len - 32768 */
			if (len > 32768) {
				len -= 32768;
				flags = GPUNVME_EXTENT_UNWRITTEN;
			}
			if (len == 0)
				return CORRUPT("inode %llu: zero-length extent at logical block %llu", ino,
					       (unsigned long long)lblk);
			if (lblk + len > hi)
				return CORRUPT("inode %llu: extent at logical block %llu runs past its index range", ino,
					       (unsigned long long)lblk);
			if (!blk_ok(w->e, pblk, len))
				return CORRUPT("inode %llu: extent at logical block %llu maps blocks %llu+%u outside the file system",
					       ino, (unsigned long long)lblk, (unsigned long long)pblk, len);
			int rc = spend(w, len);
			if (rc || (rc = push_blocks(w, lblk, pblk, len, flags)))
				return rc;
			w->next_lblk = lblk + len;
		} else {
			uint64_t child = le32(x + 4) | ((uint64_t)le16(x + 8) << 32);
			uint64_t next = i + 1 < entries ? le32(x + 12) : hi;
			if (next <= lblk)
				return CORRUPT("inode %llu: extent index entries out of order", ino);
			if (!blk_ok(w->e, child, 1))
				return CORRUPT("inode %llu: extent index points at block %llu outside the file system", ino,
					       (unsigned long long)child);
			int rc = spend(w, 1);
			if (rc)
				return rc;
			uint8_t *b = w->buf[depth - 1];
			if (!b && !(b = w->buf[depth - 1] = malloc(bs)))
				return gpunvme_set_error(-ENOMEM, "out of memory");
			if ((rc = fs_read(w->fs, child * bs, b, bs)))
				return rc;
			if ((rc = ext_node(w, b, bs, depth - 1u, false, lblk, next)))
				return rc;
		}
	}
	return 0;
}

/* "Direct/Indirect Block Addressing" (ext2/3): i_block[0..11] direct,
 * [12] single, [13] double, [14] triple indirect; a zero pointer is a hole. */
static int ind_walk(struct walk *w, uint64_t blk, int level, uint64_t lblk)
{
	uint32_t bs = w->fs->block_size;
	uint32_t per = bs / 4;
	if (!blk_ok(w->e, blk, 1))
		return CORRUPT("inode %llu: indirect block %llu is outside the file system", (unsigned long long)w->in->ino,
			       (unsigned long long)blk);
	int rc = spend(w, 1);
	if (rc)
		return rc;
	uint8_t *b = w->buf[level];
	if (!b && !(b = w->buf[level] = malloc(bs)))
		return gpunvme_set_error(-ENOMEM, "out of memory");
	if ((rc = fs_read(w->fs, blk * bs, b, bs)))
		return rc;
	uint64_t span = 1;
	for (int i = 0; i < level; i++)
		span *= per;
	for (uint32_t i = 0; i < per; i++) {
		uint32_t p = le32(b + (size_t)i * 4);
		if (!p)
			continue;
		uint64_t l = lblk + i * span;
		if (level == 0) {
			if (!blk_ok(w->e, p, 1))
				return CORRUPT("inode %llu: block %u of logical block %llu is outside the file system",
					       (unsigned long long)w->in->ino, p, (unsigned long long)l);
			if ((rc = spend(w, 1)) || (rc = push_blocks(w, l, p, 1, 0)))
				return rc;
		} else if ((rc = ind_walk(w, p, level - 1, l))) {
			return rc;
		}
		/* ind_walk reused buf[level - 1] only: ours is intact */
	}
	return 0;
}

/* The inode's block map, in file-system-relative bytes, sorted. */
static int map_inode(struct gpunvme_fs *fs, const struct e4_inode *in, struct fs_extents *out)
{
	struct walk w = { .fs = fs, .e = E(fs), .in = in, .budget = E(fs)->blocks_count };
	int rc = 0;
	if (in->flags & E4_INLINE_DATA_FL) {
		/* "Inline Data" (ext4 data structures): the bytes sit in i_block
		 * and the system.data xattr, in no block a controller can read:
		 * pread serves them (read_inline), a DMA path cannot */
		rc = gpunvme_set_error(-ENOTSUP, "ext4: inode %llu keeps its data inline in the inode (inline_data): it "
					       "has no extents to read by DMA; read it through the CPU (gpunvme cat), or "
					       "make the file system without inline_data (mkfs.ext4 -O ^inline_data)",
				       (unsigned long long)in->ino);
	} else if (in->flags & E4_EXTENTS_FL) {
		rc = ext_node(&w, in->iblock, E4_IBLOCK_SIZE, 0, true, 0, 1ull << 32);
	} else {
		uint32_t per = fs->block_size / 4;
		for (uint32_t i = 0; i < 12 && !rc; i++) {
			uint32_t p = le32(in->iblock + i * 4);
			if (!p)
				continue;
			if (!blk_ok(w.e, p, 1))
				rc = CORRUPT("inode %llu: block %u of logical block %u is outside the file system",
					     (unsigned long long)in->ino, p, i);
			else if (!(rc = spend(&w, 1)))
				rc = push_blocks(&w, i, p, 1, 0);
		}
		uint64_t base = 12, span = per;
		for (int lvl = 0; lvl < 3 && !rc; lvl++) {
			uint32_t p = le32(in->iblock + (12 + lvl) * 4);
			if (p)
				rc = ind_walk(&w, p, lvl, base);
			base += span;
			span *= per;
		}
	}
	if (!rc)
		rc = fs_extents_finish(&w.ext);
	if (rc) {
		walk_free(&w);
		return rc;
	}
	*out = w.ext;
	w.ext.v = NULL;
	walk_free(&w);
	return 0;
}

static int e4_extents(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_extent **ext, size_t *n)
{
	struct e4_inode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	if (in.flags & E4_ENCRYPT_FL)
		return gpunvme_set_error(-ENOTSUP, "ext4: inode %llu is encrypted", (unsigned long long)ino);
	struct fs_extents e = { 0 };
	if ((rc = map_inode(fs, &in, &e)))
		return rc;
	*ext = e.v;
	*n = e.n;
	return 0;
}

/* ---- inline data ("Inline Data", "Extended Attributes") ---------------- */

/* The value of the in-inode xattr system.data (name index 7, "data"):
 * the rest of an inline file beyond the 60 bytes of i_block. *len = 0 when
 * the attribute is absent or empty. */
static int inline_xattr(const struct e4 *e, const struct e4_inode *in, const uint8_t **val, size_t *len)
{
	(void)e;
	*val = NULL;
	*len = 0;
	unsigned long long ino = (unsigned long long)in->ino;
	if (in->raw_len <= E4_GOOD_OLD_INODE)
		return 0;
	size_t start = E4_GOOD_OLD_INODE + in->extra_isize;
	if (start + 4 > in->raw_len || le32(in->raw + start) != 0xEA020000u)
		return 0;
	size_t first = start + 4, end = in->raw_len, p = first;
	while (p + 4 <= end && le32(in->raw + p) != 0) {
		if (p + 16 > end)
			return CORRUPT("inode %llu: in-inode xattr entry runs past the inode", ino);
		const uint8_t *x = in->raw + p;
		uint8_t nlen = x[0], idx = x[1];
		uint16_t voff = le16(x + 2);
		uint32_t vino = le32(x + 4), vsize = le32(x + 8);
		size_t elen = (16u + nlen + 3u) & ~3u;
		if (p + elen > end)
			return CORRUPT("inode %llu: in-inode xattr name runs past the inode", ino);
		if (idx == 7 && nlen == 4 && !memcmp(x + 16, "data", 4)) {
			if (vino)
				return gpunvme_set_error(-ENOTSUP, "ext4: inode %llu: inline data in an EA inode", ino);
			if (vsize > end - first || voff > end - first - vsize)
				return CORRUPT("inode %llu: system.data value (%u bytes at %u) runs past the inode", ino, vsize,
					       voff);
			*val = in->raw + first + voff;
			*len = vsize;
			return 0;
		}
		p += elen;
	}
	return 0;
}

static int64_t copy_inline(const struct e4_inode *in, const uint8_t *x, size_t xlen, void *buf, size_t len, uint64_t off)
{
	/* inline file bytes: i_block (60) then the system.data value */
	uint8_t *o = buf;
	size_t done = 0;
	uint64_t total = E4_IBLOCK_SIZE + xlen;
	/* i_size may exceed the inline space (a sparse file that was never
	 * written: mkfs.ext4 -d makes these): Linux reads the inline bytes
	 * and zeroes the rest up to i_size (fs/ext4/inline.c,
	 * ext4_read_inline_folio zeroes past min(inline size, i_size)), and
	 * e2fsck accepts it. */
	while (done < len && off + done < in->size) {
		uint64_t p = off + done;
		o[done++] = p >= total ? 0 : p < E4_IBLOCK_SIZE ? in->iblock[p] : x[p - E4_IBLOCK_SIZE];
	}
	return (int64_t)done;
}

static int64_t e4_read_inline(struct gpunvme_fs *fs, uint64_t ino, void *buf, size_t len, uint64_t off)
{
	struct e4_inode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	if (in.flags & E4_INLINE_DATA_FL) {
		if (in.flags & E4_ENCRYPT_FL)
			return gpunvme_set_error(-ENOTSUP, "ext4: inode %llu is encrypted", (unsigned long long)ino);
		const uint8_t *x;
		size_t xl;
		if ((rc = inline_xattr(E(fs), &in, &x, &xl)))
			return rc;
		return copy_inline(&in, x, xl, buf, len, off);
	}
	if ((in.mode & S_IFMT_) != S_IFLNK_)
		return -ENODATA;
	/* "Symbolic Links": a target shorter than 60 bytes in a symlink with
	 * no data blocks (i_blocks counts only an xattr block) is in i_block */
	uint64_t ea = in.file_acl ? fs->block_size : 0;
	if (in.blocks_bytes <= ea) {
		if (in.size >= E4_IBLOCK_SIZE)
			return CORRUPT("inode %llu: fast symlink of %llu bytes", (unsigned long long)ino,
				       (unsigned long long)in.size);
		return copy_inline(&in, NULL, 0, buf, len, off);
	}
	/* a slow symlink: through its block map (fs.c only maps regular files) */
	struct fs_extents m = { 0 };
	if ((rc = map_inode(fs, &in, &m)))
		return rc;
	uint8_t *o = buf;
	size_t done = 0;
	while (done < len && off + done < in.size) {
		uint64_t contig = 0;
		int64_t phys = gpunvme_extent_map(m.v, m.n, off + done, &contig);
		size_t k = len - done;
		if (contig && contig < k)
			k = (size_t)contig;
		if (k > in.size - (off + done))
			k = (size_t)(in.size - (off + done));
		if (phys < 0)
			memset(o + done, 0, k);
		else if ((rc = fs_read(fs, (uint64_t)phys, o + done, k)))
			break;
		done += k;
	}
	free(m.v);
	return rc ? rc : (int64_t)done;
}

/* ---- directories ("Directory Entries", "Hash Tree Directories") --------- */

static int ftype_of(uint8_t t)
{
	switch (t) {
	case 1: return GPUNVME_FT_REG;
	case 2: return GPUNVME_FT_DIR;
	case 7: return GPUNVME_FT_SYMLINK;
	case 3: case 4: case 5: case 6: return GPUNVME_FT_OTHER;
	default: return GPUNVME_FT_UNKNOWN;
	}
}

/* Walk one region of ext4_dir_entry_2 records (a directory block, or a part
 * of inline data). Entries with inode 0 are unused: deleted entries, the
 * checksum tail, and the fake entry covering an htree dx_node block. The
 * dx_root block is block 0 with "." and a ".." whose rec_len covers the
 * rest of the block (dx_root_info and the index), so a linear walk sees
 * exactly the real entries in every block of an htree directory. */
static int dir_region(struct gpunvme_fs *fs, uint64_t dino, const uint8_t *b, size_t size, uint64_t where,
		      gpunvme_dirent_cb cb, void *arg)
{
	struct e4 *e = E(fs);
	bool ft = (e->incompat & INCOMPAT_FILETYPE) != 0;
	size_t off = 0;
	while (off < size) {
		unsigned long long at = (unsigned long long)(where + off);
		if (size - off < 8)
			return CORRUPT("directory %llu: entry at byte %llu runs past the block", (unsigned long long)dino, at);
		const uint8_t *d = b + off;
		uint32_t ino = le32(d);
		uint32_t rec = le16(d + 4);
		if (fs->block_size >= 65536 && size == fs->block_size) {
			/* "Linear Directories": 64 KiB blocks encode 65536 as 65535 or 0 */
			if (rec == 65535 || rec == 0)
				rec = 65536;
			else
				rec = (rec & 65532) | ((rec & 3) << 16);
		}
		uint32_t nlen = ft ? d[6] : le16(d + 6);
		if (rec < 12)
			return CORRUPT("directory %llu: entry at byte %llu has rec_len %u (less than 12)",
				       (unsigned long long)dino, at, rec);
		if (rec % 4)
			return CORRUPT("directory %llu: entry at byte %llu has rec_len %u (not a multiple of 4)",
				       (unsigned long long)dino, at, rec);
		if (rec > size - off)
			return CORRUPT("directory %llu: entry at byte %llu has rec_len %u, past the block end",
				       (unsigned long long)dino, at, rec);
		if (nlen > 255 || 8 + nlen > rec)
			return CORRUPT("directory %llu: entry at byte %llu has name_len %u larger than its rec_len %u",
				       (unsigned long long)dino, at, nlen, rec);
		if (ino) {
			if (ino > e->inodes_count)
				return CORRUPT("directory %llu: entry at byte %llu names inode %u (of %u)",
					       (unsigned long long)dino, at, ino, e->inodes_count);
			if (nlen == 0)
				return CORRUPT("directory %llu: entry at byte %llu has an empty name", (unsigned long long)dino, at);
			int r = cb(arg, (const char *)d + 8, nlen, ino, ft ? ftype_of(d[7]) : GPUNVME_FT_UNKNOWN);
			if (r)
				return r;
		}
		off += rec;
	}
	return 0;
}

/* "Checksums", directory leaf blocks: a 12-byte fake entry at the end
 * (inode 0, rec_len 12, name_len 0, file_type 0xDE) holds crc32c(inode
 * seed, block up to the tail). htree dx blocks carry a dx_tail instead,
 * which this reader does not check (it never interprets the index). */
static int dir_block_csum(struct gpunvme_fs *fs, const struct e4_inode *in, const uint8_t *b, uint64_t lblk)
{
	uint32_t bs = fs->block_size;
	const uint8_t *t = b + bs - 12;
	/* htree index blocks end in a dx_tail, and a directory converted
	 * from linear keeps its old leaf tail in the unused index space: a
	 * dx_root (block 0 of an indexed directory) or a dx_node (one fake
	 * entry, inode 0, spanning the block) must not be checked as a leaf */
	if ((lblk == 0 && (in->flags & E4_INDEX_FL)) ||
	    (le32(b) == 0 && (le16(b + 4) == (bs & 0xffffu) || (bs == 65536 && le16(b + 4) == 0))))
		return 0;
	if (le32(t) != 0 || le16(t + 4) != 12 || t[6] != 0 || t[7] != 0xDE)
		return 0;
	uint32_t c = crc32c(in->csum_seed, b, bs - 12);
	if (c != le32(t + 8))
		return gpunvme_set_error(-EUCLEAN,
					 "ext4: directory %llu block %llu checksum mismatch (stored 0x%08x, computed 0x%08x)",
					 (unsigned long long)in->ino, (unsigned long long)lblk, le32(t + 8), c);
	return 0;
}

static int e4_readdir(struct gpunvme_fs *fs, uint64_t ino, gpunvme_dirent_cb cb, void *arg)
{
	struct e4_inode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	if ((in.mode & S_IFMT_) != S_IFDIR_)
		return gpunvme_set_error(-ENOTDIR, "ext4: inode %llu is not a directory", (unsigned long long)ino);
	if (in.flags & E4_ENCRYPT_FL)
		return gpunvme_set_error(-ENOTSUP, "ext4: directory %llu is encrypted", (unsigned long long)ino);
	if (in.flags & E4_INLINE_DATA_FL) {
		/* "Inline Directories": the parent's inode number in the first
		 * 4 bytes of i_block, entries in the other 56 and in the
		 * system.data value; "." and ".." are not stored, so made up */
		const uint8_t *x;
		size_t xl;
		if ((rc = inline_xattr(E(fs), &in, &x, &xl)))
			return rc;
		uint32_t parent = le32(in.iblock);
		if (parent == 0 || parent > E(fs)->inodes_count)
			return CORRUPT("inline directory %llu: parent inode %u is invalid", (unsigned long long)ino, parent);
		if ((rc = cb(arg, ".", 1, ino, GPUNVME_FT_DIR)) || (rc = cb(arg, "..", 2, parent, GPUNVME_FT_DIR)))
			return rc;
		if ((rc = dir_region(fs, ino, in.iblock + 4, E4_IBLOCK_SIZE - 4, 4, cb, arg)))
			return rc;
		return xl ? dir_region(fs, ino, x, xl, E4_IBLOCK_SIZE, cb, arg) : 0;
	}
	struct fs_extents m = { 0 };
	if ((rc = map_inode(fs, &in, &m)))
		return rc;
	uint32_t bs = fs->block_size;
	uint8_t *b = malloc(bs);
	if (!b) {
		free(m.v);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	/* holes and unwritten ranges in a directory hold no entries */
	for (size_t i = 0; i < m.n && !rc; i++) {
		if (m.v[i].flags & GPUNVME_EXTENT_UNWRITTEN)
			continue;
		for (uint64_t o = 0; o < m.v[i].length && !rc; o += bs) {
			uint64_t lpos = m.v[i].logical + o;
			if (lpos >= in.size)
				break;
			if ((rc = fs_read(fs, m.v[i].physical + o, b, bs)))
				break;
			if (E(fs)->csum && (rc = dir_block_csum(fs, &in, b, lpos / bs)))
				break;
			rc = dir_region(fs, ino, b, bs, lpos, cb, arg);
		}
	}
	free(b);
	free(m.v);
	return rc;
}

const struct gpunvme_fs_ops gpunvme_fs_ext4 = {
	.name = "ext4",
	.probe = e4_probe,
	.mount = e4_mount,
	.unmount = e4_unmount,
	.stat = e4_stat,
	.readdir = e4_readdir,
	.extents = e4_extents,
	.read_inline = e4_read_inline,
};
