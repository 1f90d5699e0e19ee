/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * XFS on-disk metadata decoder: superblock, inodes, data fork extent maps
 * (extent list or BMBT) and directories in every form, read straight from a
 * block source with no mount, the way the XAL library does.
 *
 * Section names in comments refer to the "XFS Algorithms & Data Structures"
 * document (the XFS on-disk format reference). Everything on disk is
 * big-endian except the CRC fields (little-endian). Every on-disk number is
 * checked before use; every read goes through fs_read(); every walk has a
 * bound, so a corrupt image gives an error, never a crash or a hang.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fs/fs_internal.h"

#define XFS_SB_MAGIC      0x58465342u  /* "XFSB" */
#define XFS_DINODE_MAGIC  0x494eu      /* "IN" */
#define XFS_BMAP_MAGIC    0x424d4150u  /* "BMAP": v4 BMBT block */
#define XFS_BMAP_CRC_MAGIC 0x424d4133u /* "BMA3": v5 BMBT block */
#define XFS_DIR2_BLOCK_MAGIC 0x58443242u  /* "XD2B" */
#define XFS_DIR2_DATA_MAGIC  0x58443244u  /* "XD2D" */
#define XFS_DIR3_BLOCK_MAGIC 0x58444233u  /* "XDB3" */
#define XFS_DIR3_DATA_MAGIC  0x58444433u  /* "XDD3" */

/* Superblock: versionnum bits ("Superblocks", sb_versionnum). */
#define XFS_SB_VERSION_NUMBITS   0x000fu
#define XFS_SB_VERSION_EXTFLGBIT 0x1000u
#define XFS_SB_VERSION_DIRV2BIT  0x2000u
#define XFS_SB_VERSION_MOREBITSBIT 0x8000u
#define XFS_SB_VERSION2_FTYPE    0x0200u  /* sb_features2, v4 */
#define XFS_SB_VERSION2_CRCBIT   0x0100u

/* sb_features_incompat (v5) */
#define XFS_SB_FEAT_INCOMPAT_FTYPE       (1u << 0)
#define XFS_SB_FEAT_INCOMPAT_SPINODES    (1u << 1)
#define XFS_SB_FEAT_INCOMPAT_META_UUID   (1u << 2)
#define XFS_SB_FEAT_INCOMPAT_BIGTIME     (1u << 3)
#define XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR (1u << 4)
#define XFS_SB_FEAT_INCOMPAT_NREXT64     (1u << 5)
#define XFS_SB_FEAT_INCOMPAT_EXCHRANGE   (1u << 6)
#define XFS_SB_FEAT_INCOMPAT_PARENT      (1u << 7)
#define XFS_SB_FEAT_INCOMPAT_METADIR     (1u << 8)
#define XFS_SB_FEAT_INCOMPAT_ZONED       (1u << 9)
/* Features that change nothing a reader of the data device relies on, or
 * that this decoder implements (FTYPE: dirent file types; SPINODES: inode
 * addresses are computed arithmetically; BIGTIME: timestamps; NREXT64:
 * 64-bit extent counters; PARENT: parent pointers live in xattrs; METADIR:
 * metadata inodes move, user files don't; EXCHRANGE: log items only). */
#define XFS_INCOMPAT_READABLE (XFS_SB_FEAT_INCOMPAT_FTYPE | XFS_SB_FEAT_INCOMPAT_SPINODES | \
	XFS_SB_FEAT_INCOMPAT_META_UUID | XFS_SB_FEAT_INCOMPAT_BIGTIME | XFS_SB_FEAT_INCOMPAT_NREXT64 | \
	XFS_SB_FEAT_INCOMPAT_EXCHRANGE | XFS_SB_FEAT_INCOMPAT_PARENT | XFS_SB_FEAT_INCOMPAT_METADIR)
#define XFS_SB_FEAT_RO_COMPAT_REFLINK (1u << 2)

/* Inode core ("On-disk Inode", xfs_dinode) */
#define XFS_DINODE_CORE_V2 100u   /* v1/v2 core + di_next_unlinked */
#define XFS_DINODE_CORE_V3 176u
#define XFS_DINODE_CRC_OFF 100u
enum { XFS_DINODE_FMT_DEV, XFS_DINODE_FMT_LOCAL, XFS_DINODE_FMT_EXTENTS, XFS_DINODE_FMT_BTREE };
#define XFS_DIFLAG_REALTIME  0x0001u
#define XFS_DIFLAG2_REFLINK  0x0002u
#define XFS_DIFLAG2_BIGTIME  0x0008u
#define XFS_DIFLAG2_NREXT64  0x0010u
#define XFS_BIGTIME_EPOCH_OFFSET 2147483648ll  /* bigtime counts ns from 1901-12-13 */

/* "Long Format B+trees": BMBT block headers */
#define XFS_BTREE_LBLOCK_LEN     24u
#define XFS_BTREE_LBLOCK_CRC_LEN 72u
#define XFS_BTREE_LBLOCK_CRC_OFF 64u
#define XFS_BM_MAXLEVELS 16u   /* generous: the real bound is ~9 */

/* "Directories": data space ends at the leaf offset (32 GiB) */
#define XFS_DIR2_LEAF_OFFSET (32ull << 30)
#define XFS_DIR2_DATA_HDR_LEN 16u
#define XFS_DIR3_DATA_HDR_LEN 64u
#define XFS_DIR3_CRC_OFF 4u
#define XFS_DIR2_DATA_FREE_TAG 0xffffu

#define S_IFMT_  0170000u
#define S_IFREG_ 0100000u
#define S_IFDIR_ 0040000u
#define S_IFLNK_ 0120000u

struct xfs {
	uint32_t blocksize, sectsize, inodesize, agblocks, agcount, dirblksize;
	uint8_t blocklog, agblklog, inopblog;
	uint64_t dblocks, rblocks;
	int v5, ftype, reflink;
};

struct xinode {
	uint64_t ino;
	uint8_t raw[2048];     /* sb_inodesize is at most 2048 */
	uint16_t mode;
	uint8_t version, format;
	uint64_t size, nblocks, nextents;
	uint16_t flags;
	uint64_t flags2;
	uint32_t dfork, dsize; /* data fork: offset in raw, bytes */
};

static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]; }

/* ---- crc32c ("Metadata Checksums"): Castagnoli, reflected, slicing-by-8 --- */

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

static uint32_t crc32c_upd(uint32_t c, const uint8_t *p, size_t n)
{
	while (n >= 8) {
		uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		c = crc_tab[7][a & 0xff] ^ crc_tab[6][(a >> 8) & 0xff] ^ crc_tab[5][(a >> 16) & 0xff] ^
		    crc_tab[4][a >> 24] ^ crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^ crc_tab[0][p[7]];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
	return c;
}

/* XFS computes the crc over the whole object with the crc field taken as
 * zero, and stores it little-endian. */
static int xfs_crc_ok(const uint8_t *buf, size_t len, size_t crc_off)
{
	static const uint8_t zero[4];
	pthread_once(&crc_once, crc_init);
	uint32_t c = crc32c_upd(0xffffffffu, buf, crc_off);
	c = crc32c_upd(c, zero, 4);
	c = crc32c_upd(c, buf + crc_off + 4, len - crc_off - 4);
	return ~c == le32(buf + crc_off);
}

/* ---- superblock ("Superblocks") ----------------------------------------------- */

static int xfs_probe(struct gpunvme_fs *fs)
{
	uint8_t m[4];
	if (fs->size < 512 || fs_read(fs, 0, m, 4))
		return 0;
	return be32(m) == XFS_SB_MAGIC;
}

static int ilog2_exact(uint64_t v, unsigned *log)
{
	if (!v || (v & (v - 1)))
		return 0;
	unsigned l = 0;
	while ((1ull << l) < v)
		l++;
	*log = l;
	return 1;
}

static void incompat_names(uint32_t f, char *s, size_t n)
{
	static const char *const names[] = { [9] = "zoned", [4] = "needsrepair" };
	size_t k = 0;
	s[0] = 0;
	for (unsigned b = 0; b < 32 && k < n; b++) {
		if (!(f & (1u << b)))
			continue;
		const char *nm = b < sizeof(names) / sizeof(names[0]) ? names[b] : NULL;
		int w = nm ? snprintf(s + k, n - k, "%s%s", k ? ", " : "", nm)
			   : snprintf(s + k, n - k, "%sunknown bit %u", k ? ", " : "", b);
		if (w < 0)
			break;
		k += (size_t)w;
	}
}

static int xfs_mount(struct gpunvme_fs *fs)
{
	uint8_t sb[512];
	int rc = fs_read(fs, 0, sb, sizeof(sb));
	if (rc)
		return rc;
	if (be32(sb) != XFS_SB_MAGIC)
		return gpunvme_set_error(-EINVAL, "xfs: no superblock magic");
	struct xfs *x = calloc(1, sizeof(*x));
	if (!x)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	x->blocksize = be32(sb + 4);
	x->dblocks = be64(sb + 8);
	x->rblocks = be64(sb + 16);
	uint64_t rootino = be64(sb + 56);
	x->agblocks = be32(sb + 84);
	x->agcount = be32(sb + 88);
	uint16_t ver = be16(sb + 100);
	x->sectsize = be16(sb + 102);
	x->inodesize = be16(sb + 104);
	uint16_t inopblock = be16(sb + 106);
	uint8_t blocklog = sb[120], sectlog = sb[121], inodelog = sb[122], inopblog = sb[123], agblklog = sb[124];
	uint8_t inprogress = sb[126], dirblklog = sb[192];
	uint32_t features2 = be32(sb + 200);
	unsigned l;
	const char *bad = NULL;

	if ((ver & XFS_SB_VERSION_NUMBITS) == 5)
		x->v5 = 1;
	else if ((ver & XFS_SB_VERSION_NUMBITS) != 4) {
		rc = gpunvme_set_error(-ENOTSUP, "xfs: superblock version %u is not supported (4 and 5 are)",
				       ver & XFS_SB_VERSION_NUMBITS);
		goto fail;
	}
	/* Geometry: every field used in address arithmetic must agree with
	 * its log2 twin, so no shift or multiplication below can overflow. */
	if (!ilog2_exact(x->blocksize, &l) || l != blocklog || l < 9 || l > 16)
		bad = "sb_blocksize";
	else if (!ilog2_exact(x->sectsize, &l) || l != sectlog || l < 9 || l > 15 || x->sectsize > x->blocksize)
		bad = "sb_sectsize";
	else if (!ilog2_exact(x->inodesize, &l) || l != inodelog || l < 8 || l > 11 || x->inodesize > x->blocksize ||
		 (x->v5 && x->inodesize < 512))
		bad = "sb_inodesize";
	else if (inopblock != x->blocksize / x->inodesize || !ilog2_exact(inopblock, &l) || l != inopblog)
		bad = "sb_inopblock";
	else if (x->agblocks < 1 || x->agcount < 1 || agblklog > 31 || (1ull << agblklog) < x->agblocks ||
		 (agblklog > 0 && (1ull << (agblklog - 1)) >= x->agblocks))
		bad = "sb_agblocks/sb_agblklog";
	else if (agblklog + inopblog > 32)
		bad = "sb_agblklog + sb_inopblog (AG inode numbers are 32-bit)";
	else if (x->dblocks == 0 || x->dblocks > (uint64_t)x->agcount * x->agblocks ||
		 x->dblocks <= (uint64_t)(x->agcount - 1) * x->agblocks)
		bad = "sb_dblocks";
	else if (blocklog + dirblklog > 16)
		bad = "sb_dirblklog";
	if (bad) {
		rc = gpunvme_set_error(-EUCLEAN, "xfs: corrupt superblock: bad %s", bad);
		goto fail;
	}
	if (inprogress) {
		rc = gpunvme_set_error(-EUCLEAN, "xfs: superblock says mkfs did not finish (sb_inprogress)");
		goto fail;
	}
	/* The data section must lie on the device: refuse a truncated image
	 * here, as ext4 does, rather than file by file later. */
	if (x->dblocks > fs->size / x->blocksize) {
		rc = gpunvme_set_error(-EUCLEAN,
				       "xfs: the file system needs %llu blocks of %u bytes (%llu bytes) but the device "
				       "holds %llu bytes: the image is truncated (or --offset is wrong)",
				       (unsigned long long)x->dblocks, x->blocksize,
				       (unsigned long long)(x->dblocks * x->blocksize), (unsigned long long)fs->size);
		goto fail;
	}
	x->blocklog = blocklog;
	x->agblklog = agblklog;
	x->inopblog = inopblog;
	x->dirblksize = x->blocksize << dirblklog;

	if (x->v5) {
		/* "Metadata Checksums": sb_crc covers one sector. */
		uint8_t *sec = malloc(x->sectsize);
		if (!sec) {
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
			goto fail;
		}
		rc = fs_read(fs, 0, sec, x->sectsize);
		int ok = !rc && xfs_crc_ok(sec, x->sectsize, 224);
		free(sec);
		if (rc)
			goto fail;
		if (!ok) {
			rc = gpunvme_set_error(-EUCLEAN, "xfs: superblock checksum mismatch");
			goto fail;
		}
		uint32_t incompat = be32(sb + 216);
		if (incompat & ~XFS_INCOMPAT_READABLE) {
			char names[160];
			incompat_names(incompat & ~XFS_INCOMPAT_READABLE, names, sizeof(names));
			rc = gpunvme_set_error(-ENOTSUP, "xfs: incompatible features not supported: %s", names);
			goto fail;
		}
		x->ftype = !!(incompat & XFS_SB_FEAT_INCOMPAT_FTYPE);
		x->reflink = !!(be32(sb + 212) & XFS_SB_FEAT_RO_COMPAT_REFLINK);
	} else {
		if (!(ver & XFS_SB_VERSION_DIRV2BIT)) {
			rc = gpunvme_set_error(-ENOTSUP, "xfs: version 1 directories are not supported");
			goto fail;
		}
		if ((ver & XFS_SB_VERSION_MOREBITSBIT) && (features2 & XFS_SB_VERSION2_CRCBIT)) {
			rc = gpunvme_set_error(-EUCLEAN, "xfs: corrupt superblock: v4 with the CRC feature");
			goto fail;
		}
		x->ftype = (ver & XFS_SB_VERSION_MOREBITSBIT) && (features2 & XFS_SB_VERSION2_FTYPE);
	}
	fs->priv = x;
	fs->block_size = x->blocksize;
	fs->root_ino = rootino;
	return 0;
fail:
	free(x);
	return rc;
}

static void xfs_unmount(struct gpunvme_fs *fs)
{
	free(fs->priv);
	fs->priv = NULL;
}

/* ---- addresses ("Allocation Groups", "Inode Numbers") ------------------------------ */

/* Inode number -> byte address: agno | agbno | offset in block. Sparse
 * inode chunks need nothing special because this is pure arithmetic. */
static int ino_addr(const struct xfs *x, uint64_t ino, uint64_t *addr)
{
	unsigned shift = x->agblklog + x->inopblog;
	uint64_t agno = shift >= 64 ? 0 : ino >> shift;
	uint64_t agbno = (ino >> x->inopblog) & ((1ull << x->agblklog) - 1);
	uint64_t off = ino & ((1ull << x->inopblog) - 1);
	if (ino == 0 || agno >= x->agcount || agbno >= x->agblocks)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode number %llu is out of range", (unsigned long long)ino);
	*addr = ((agno * x->agblocks + agbno) << x->blocklog) + off * x->inodesize;
	return 0;
}

/* ---- inodes ("On-disk Inode") ---------------------------------------------------------- */

static int read_inode(struct gpunvme_fs *fs, uint64_t ino, struct xinode *ip)
{
	const struct xfs *x = fs->priv;
	uint64_t addr = 0; /* set by ino_addr on success (gcc 13 -O3 cannot tell) */
	int rc = ino_addr(x, ino, &addr);
	if (rc)
		return rc;
	uint8_t *r = ip->raw;
	if ((rc = fs_read(fs, addr, r, x->inodesize)))
		return rc;
	ip->ino = ino;
	if (be16(r) != XFS_DINODE_MAGIC)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: bad magic", (unsigned long long)ino);
	ip->version = r[4];
	if (x->v5 ? ip->version != 3 : (ip->version != 1 && ip->version != 2))
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: bad version %u", (unsigned long long)ino, ip->version);
	uint32_t core = XFS_DINODE_CORE_V2;
	if (ip->version == 3) {
		if (!xfs_crc_ok(r, x->inodesize, XFS_DINODE_CRC_OFF))
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: checksum mismatch", (unsigned long long)ino);
		if (be64(r + 152) != ino)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: di_ino says %llu", (unsigned long long)ino,
						 (unsigned long long)be64(r + 152));
		core = XFS_DINODE_CORE_V3;
		ip->flags2 = be64(r + 120);
	} else {
		ip->flags2 = 0;
	}
	ip->mode = be16(r + 2);
	ip->format = r[5];
	ip->size = be64(r + 56);
	ip->nblocks = be64(r + 64);
	ip->flags = be16(r + 90);
	ip->nextents = (ip->flags2 & XFS_DIFLAG2_NREXT64) ? be64(r + 24) : be32(r + 76);
	if (ip->size >> 63)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: negative size", (unsigned long long)ino);
	/* "Inode Data Fork": di_forkoff (in 8-byte units) splits the literal
	 * area between the data and the attribute fork. */
	uint32_t lit = x->inodesize - core;
	ip->dfork = core;
	ip->dsize = lit;
	if (r[82]) {
		if ((uint32_t)r[82] * 8 >= lit)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: bad di_forkoff", (unsigned long long)ino);
		ip->dsize = (uint32_t)r[82] * 8;
	}
	return 0;
}

static int xfs_stat(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_stat *st)
{
	const struct xfs *x = fs->priv;
	struct xinode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	const uint8_t *r = in.raw;
	memset(st, 0, sizeof(*st));
	st->ino = ino;
	st->mode = in.mode;
	st->nlink = in.version == 1 ? be16(r + 6) : be32(r + 16);
	st->uid = be32(r + 8);
	st->gid = be32(r + 12);
	st->size = in.size;
	st->blocks = in.nblocks > (UINT64_MAX >> x->blocklog) ? UINT64_MAX : in.nblocks << x->blocklog;
	/* "Timestamps": bigtime is an unsigned ns count from the 1901 epoch. */
	if (in.flags2 & XFS_DIFLAG2_BIGTIME) {
		uint64_t t = be64(r + 40);
		st->mtime_sec = (int64_t)(t / 1000000000u) - XFS_BIGTIME_EPOCH_OFFSET;
		st->mtime_nsec = (uint32_t)(t % 1000000000u);
	} else {
		st->mtime_sec = (int32_t)be32(r + 40);
		st->mtime_nsec = be32(r + 44);
	}
	return 0;
}

/* ---- data fork extent maps ("Data Extents", "B+tree Extent List") ----------------------- */

struct walk {
	struct gpunvme_fs *fs;
	const struct xinode *ip;
	struct fs_extents *e;
	uint64_t next_off;     /* records must be sorted and disjoint */
	uint64_t nrecs;        /* must end equal to di_nextents */
	uint64_t budget;       /* BMBT blocks we may still read */
	uint8_t *blk[XFS_BM_MAXLEVELS];
};

/* One packed 128-bit record: flag:1 | startoff:54 | startblock:52 | count:21. */
static int put_rec(struct walk *w, const uint8_t *rec)
{
	const struct xfs *x = w->fs->priv;
	uint64_t l0 = be64(rec), l1 = be64(rec + 8);
	uint32_t flag = (uint32_t)(l0 >> 63);
	uint64_t off = (l0 & ((1ull << 63) - 1)) >> 9;
	uint64_t fsb = (l0 & 0x1ff) << 43 | l1 >> 21;
	uint64_t cnt = l1 & ((1ull << 21) - 1);
	uint64_t agno = fsb >> x->agblklog, agbno = fsb & ((1ull << x->agblklog) - 1);
	unsigned long long ino = (unsigned long long)w->ip->ino;

	if (++w->nrecs > w->ip->nextents)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: more extent records than di_nextents (%llu)", ino,
					 (unsigned long long)w->ip->nextents);
	if (cnt == 0 || off < w->next_off || off + cnt > (UINT64_MAX >> x->blocklog))
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: bad extent record at file block %llu", ino,
					 (unsigned long long)off);
	/* An extent never crosses an AG boundary. */
	if (agno >= x->agcount || agbno + cnt > x->agblocks)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: extent at file block %llu points outside the file system",
					 ino, (unsigned long long)off);
	uint64_t phys = (agno * x->agblocks + agbno) << x->blocklog, len = cnt << x->blocklog;
	if (phys > w->fs->size || len > w->fs->size - phys)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: extent at file block %llu is past the end of the device",
					 ino, (unsigned long long)off);
	w->next_off = off + cnt;
	return fs_extents_push(w->e, off << x->blocklog, phys, len, flag ? GPUNVME_EXTENT_UNWRITTEN : 0);
}

/* A BMBT block pointer (a 64-bit fsblock) -> byte address. */
static int bmbt_ptr(struct walk *w, uint64_t fsb, uint64_t *addr)
{
	const struct xfs *x = w->fs->priv;
	uint64_t agno = x->agblklog ? fsb >> x->agblklog : fsb, agbno = fsb & ((1ull << x->agblklog) - 1);
	if (agno >= x->agcount || agbno >= x->agblocks)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT pointer %llu is out of range",
					 (unsigned long long)w->ip->ino, (unsigned long long)fsb);
	*addr = (agno * x->agblocks + agbno) << x->blocklog;
	return 0;
}

/* Visit the subtree at fsblock `fsb`, which must be at `level`. The level
 * strictly decreases, and records must come out sorted, so a pointer cycle
 * or a shared subtree fails on the first repeated record; the block budget
 * is the backstop. */
static int bmbt_walk(struct walk *w, uint64_t fsb, unsigned level)
{
	const struct xfs *x = w->fs->priv;
	unsigned long long ino = (unsigned long long)w->ip->ino;
	uint64_t addr = 0; /* set by bmbt_ptr when it returns 0 (gcc -O2 cannot tell) */
	int rc = bmbt_ptr(w, fsb, &addr);
	if (rc)
		return rc;
	if (w->budget == 0)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT has more blocks than the inode owns", ino);
	w->budget--;
	uint8_t *b = w->blk[level];
	if ((rc = fs_read(w->fs, addr, b, x->blocksize)))
		return rc;
	uint32_t hdr;
	if (x->v5) {
		if (be32(b) != XFS_BMAP_CRC_MAGIC)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT block %llu: bad magic", ino,
						 (unsigned long long)fsb);
		if (!xfs_crc_ok(b, x->blocksize, XFS_BTREE_LBLOCK_CRC_OFF))
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT block %llu: checksum mismatch", ino,
						 (unsigned long long)fsb);
		if (be64(b + 56) != w->ip->ino || be64(b + 24) != addr >> 9)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT block %llu: wrong owner or address", ino,
						 (unsigned long long)fsb);
		hdr = XFS_BTREE_LBLOCK_CRC_LEN;
	} else {
		if (be32(b) != XFS_BMAP_MAGIC)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT block %llu: bad magic", ino,
						 (unsigned long long)fsb);
		hdr = XFS_BTREE_LBLOCK_LEN;
	}
	unsigned lv = be16(b + 4), n = be16(b + 6);
	uint32_t maxrecs = (x->blocksize - hdr) / 16;
	if (lv != level || n == 0 || n > maxrecs)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: BMBT block %llu: bad level or record count", ino,
					 (unsigned long long)fsb);
	for (unsigned i = 0; i < n; i++) {
		if (level == 0)
			rc = put_rec(w, b + hdr + 16u * i);
		else
			rc = bmbt_walk(w, be64(b + hdr + 8u * maxrecs + 8u * i), level - 1);
		if (rc)
			return rc;
	}
	return 0;
}

/* A fork's mappings in file-system-relative bytes, sorted and checked. */
static int fork_extents(struct gpunvme_fs *fs, const struct xinode *ip, struct fs_extents *e)
{
	const struct xfs *x = fs->priv;
	unsigned long long ino = (unsigned long long)ip->ino;
	const uint8_t *f = ip->raw + ip->dfork;
	struct walk w = { .fs = fs, .ip = ip, .e = e };
	int rc = 0;

	if ((ip->flags & XFS_DIFLAG_REALTIME) && (ip->mode & S_IFMT_) == S_IFREG_)
		return gpunvme_set_error(-ENOTSUP, "xfs: inode %llu: file data on the realtime device is not supported", ino);
	if (ip->format == XFS_DINODE_FMT_EXTENTS) {
		/* "Extent List": the records sit in the fork itself. */
		if (ip->nextents > ip->dsize / 16)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: di_nextents %llu does not fit the data fork", ino,
						 (unsigned long long)ip->nextents);
		for (uint64_t i = 0; i < ip->nextents && !rc; i++)
			rc = put_rec(&w, f + 16 * i);
	} else if (ip->format == XFS_DINODE_FMT_BTREE) {
		/* "B+tree Extent List": the root (xfs_bmdr_block) is in the
		 * fork: level, numrecs, keys[maxrecs], ptrs[maxrecs]. */
		unsigned level = be16(f), n = be16(f + 2);
		uint32_t maxrecs = (ip->dsize - 4) / 16;
		if (level == 0 || level >= XFS_BM_MAXLEVELS || n == 0 || n > maxrecs)
			return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: bad BMBT root (level %u, %u records)", ino, level, n);
		w.budget = ip->nblocks;
		if (w.budget > fs->size >> x->blocklog)
			w.budget = fs->size >> x->blocklog;
		for (unsigned l = 0; l < level && !rc; l++)
			if (!(w.blk[l] = malloc(x->blocksize)))
				rc = gpunvme_set_error(-ENOMEM, "out of memory");
		for (unsigned i = 0; i < n && !rc; i++)
			rc = bmbt_walk(&w, be64(f + 4 + 8 * maxrecs + 8 * i), level - 1);
		for (unsigned l = 0; l < level; l++)
			free(w.blk[l]);
	} else {
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: data fork format %u has no extent map", ino, ip->format);
	}
	if (!rc && w.nrecs != ip->nextents)
		rc = gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: %llu extent records, di_nextents says %llu", ino,
				       (unsigned long long)w.nrecs, (unsigned long long)ip->nextents);
	if (!rc)
		rc = fs_extents_finish(e);
	return rc;
}

static int xfs_extents(struct gpunvme_fs *fs, uint64_t ino, struct gpunvme_extent **ext, size_t *n)
{
	struct xinode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	if ((in.mode & S_IFMT_) != S_IFREG_)
		return gpunvme_set_error(-EINVAL, "xfs: inode %llu is not a regular file", (unsigned long long)ino);
	struct fs_extents e = { 0 };
	if ((rc = fork_extents(fs, &in, &e))) {
		free(e.v);
		return rc;
	}
	*ext = e.v;
	*n = e.n;
	return 0;
}

#define XFS_SYMLINK_MAGIC   0x58534c4du  /* "XSLM" */
#define XFS_SYMLINK_HDR_LEN 56u          /* xfs_dsymlink_hdr */
#define XFS_SYMLINK_CRC_OFF 12u
#define XFS_SYMLINK_MAXLEN  1024u

/* "Extent Symbolic Links": the target in data blocks. On v5 every mapping
 * (one buffer per extent, as xfs_readlink_bmap reads it) starts with an
 * xfs_dsymlink_hdr {magic, offset, bytes, crc, uuid, owner, blkno, lsn}
 * checksummed over the whole extent; v4 blocks are the bare target. */
static int64_t remote_symlink(struct gpunvme_fs *fs, const struct xinode *ip, void *buf, size_t len, uint64_t off)
{
	const struct xfs *x = fs->priv;
	unsigned long long ino = (unsigned long long)ip->ino;
	if (ip->size == 0 || ip->size > XFS_SYMLINK_MAXLEN)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: symlink of %llu bytes (at most %u)", ino,
					 (unsigned long long)ip->size, XFS_SYMLINK_MAXLEN);
	struct fs_extents e = { 0 };
	int rc = fork_extents(fs, ip, &e);
	uint8_t tgt[XFS_SYMLINK_MAXLEN];
	uint64_t got = 0;
	uint8_t *b = NULL;
	for (size_t i = 0; !rc && i < e.n && got < ip->size; i++) {
		/* a symlink is at most 1024 bytes: a few blocks, never more */
		if (e.v[i].length > 4 * (uint64_t)XFS_SYMLINK_MAXLEN + 64 * 1024) {
			rc = gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: symlink extent of %llu bytes", ino,
					       (unsigned long long)e.v[i].length);
			break;
		}
		size_t bl = (size_t)e.v[i].length;
		uint8_t *nb = realloc(b, bl);
		if (!nb) {
			rc = gpunvme_set_error(-ENOMEM, "out of memory");
			break;
		}
		b = nb;
		if ((rc = fs_read(fs, e.v[i].physical, b, bl)))
			break;
		const uint8_t *d = b;
		size_t room = bl;
		if (x->v5) {
			if (bl < XFS_SYMLINK_HDR_LEN || be32(b) != XFS_SYMLINK_MAGIC || be64(b + 32) != ip->ino ||
			    be32(b + 4) != got) {
				rc = gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: bad symlink block header", ino);
				break;
			}
			if (!xfs_crc_ok(b, bl, XFS_SYMLINK_CRC_OFF)) {
				rc = gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: symlink block checksum mismatch", ino);
				break;
			}
			d += XFS_SYMLINK_HDR_LEN;
			room -= XFS_SYMLINK_HDR_LEN;
		}
		size_t k = room < ip->size - got ? room : (size_t)(ip->size - got);
		memcpy(tgt + got, d, k);
		got += k;
	}
	free(b);
	free(e.v);
	if (!rc && got != ip->size)
		rc = gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: symlink blocks hold %llu of %llu bytes", ino,
				       (unsigned long long)got, (unsigned long long)ip->size);
	if (rc)
		return rc;
	if (off >= got)
		return 0;
	if (len > got - off)
		len = (size_t)(got - off);
	memcpy(buf, tgt + off, len);
	return (int64_t)len;
}

/* Symlink targets: local format (in the inode) or in blocks. */
static int64_t xfs_read_inline(struct gpunvme_fs *fs, uint64_t ino, void *buf, size_t len, uint64_t off)
{
	struct xinode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	if ((in.mode & S_IFMT_) == S_IFLNK_ && in.format == XFS_DINODE_FMT_EXTENTS)
		return remote_symlink(fs, &in, buf, len, off);
	/* Only symlinks keep their bytes in the inode; short form directories
	 * are not file data (the front end refuses them), and a regular file
	 * in local format is invalid ("Inode Data Fork"). */
	if (in.format != XFS_DINODE_FMT_LOCAL || (in.mode & S_IFMT_) == S_IFDIR_)
		return -ENODATA;
	if ((in.mode & S_IFMT_) != S_IFLNK_)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: inline data on a file that is not a symlink",
					 (unsigned long long)ino);
	if (in.size > in.dsize)
		return gpunvme_set_error(-EUCLEAN, "xfs: inode %llu: inline size larger than the fork", (unsigned long long)ino);
	if (off >= in.size)
		return 0;
	if (len > in.size - off)
		len = (size_t)(in.size - off);
	memcpy(buf, in.raw + in.dfork + off, len);
	return (int64_t)len;
}

/* ---- directories ("Directories") --------------------------------------------------------- */

static int dir_ftype(uint8_t t)
{
	switch (t) {
	case 1: return GPUNVME_FT_REG;
	case 2: return GPUNVME_FT_DIR;
	case 7: return GPUNVME_FT_SYMLINK;
	case 0: return GPUNVME_FT_UNKNOWN;
	default: return GPUNVME_FT_OTHER;
	}
}

static int check_ino(const struct xfs *x, uint64_t dir, uint64_t ino)
{
	uint64_t a = 0;
	if (ino_addr(x, ino, &a))
		return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: entry with bad inode number %llu",
					 (unsigned long long)dir, (unsigned long long)ino);
	return 0;
}

/* "Short Form Directories": header {count, i8count, parent}, then entries
 * {namelen, offset[2], name, [ftype], inumber (4 or 8 bytes)}. */
static int dir_sf(struct gpunvme_fs *fs, const struct xinode *ip, gpunvme_dirent_cb cb, void *arg)
{
	const struct xfs *x = fs->priv;
	unsigned long long ino = (unsigned long long)ip->ino;
	const uint8_t *p = ip->raw + ip->dfork;
	uint64_t size = ip->size;
	if (size > ip->dsize || size < 6)
		return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: bad short form size", ino);
	unsigned count = p[0], i8 = p[1], isz = i8 ? 8 : 4;
	if (i8 > count || size < 2u + isz)
		return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: bad short form header", ino);
	uint64_t parent = i8 ? be64(p + 2) : be32(p + 2);
	int rc;
	if ((rc = check_ino(x, ip->ino, parent)))
		return rc;
	if ((rc = cb(arg, ".", 1, ip->ino, GPUNVME_FT_DIR)) || (rc = cb(arg, "..", 2, parent, GPUNVME_FT_DIR)))
		return rc;
	size_t off = 2 + isz;
	for (unsigned i = 0; i < count; i++) {
		if (off + 3 > size)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: short form entry %u past the end", ino, i);
		unsigned nl = p[off];
		size_t esz = 3 + nl + (x->ftype ? 1 : 0) + isz;
		if (nl == 0 || off + esz > size)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: bad short form entry %u", ino, i);
		const uint8_t *q = p + off + 3 + nl;
		int ft = x->ftype ? dir_ftype(*q++) : GPUNVME_FT_UNKNOWN;
		uint64_t ci = i8 ? be64(q) : be32(q);
		if ((rc = check_ino(x, ip->ino, ci)))
			return rc;
		if ((rc = cb(arg, (const char *)p + off + 3, nl, ci, ft)))
			return rc;
		off += esz;
	}
	return 0;
}

/* One directory data block ("Block Directories", "Leaf Directories"):
 * a header, then entries {inumber, namelen, name, [ftype], tag} and free
 * regions {freetag 0xffff, length, ..., tag}, all 8-byte aligned. */
static int dir_data_block(struct gpunvme_fs *fs, const struct xinode *ip, uint8_t *b, uint64_t daddr, uint64_t lblk,
			  gpunvme_dirent_cb cb, void *arg)
{
	const struct xfs *x = fs->priv;
	unsigned long long ino = (unsigned long long)ip->ino;
	uint32_t bs = x->dirblksize, magic = be32(b), hdr, end = bs;
	int block_form;
	if (x->v5) {
		if (magic != XFS_DIR3_BLOCK_MAGIC && magic != XFS_DIR3_DATA_MAGIC)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: bad magic", ino,
						 (unsigned long long)lblk);
		if (!xfs_crc_ok(b, bs, XFS_DIR3_CRC_OFF))
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: checksum mismatch", ino,
						 (unsigned long long)lblk);
		if (be64(b + 40) != ip->ino || be64(b + 8) != daddr)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: wrong owner or address", ino,
						 (unsigned long long)lblk);
		block_form = magic == XFS_DIR3_BLOCK_MAGIC;
		hdr = XFS_DIR3_DATA_HDR_LEN;
	} else {
		if (magic != XFS_DIR2_BLOCK_MAGIC && magic != XFS_DIR2_DATA_MAGIC)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: bad magic", ino,
						 (unsigned long long)lblk);
		block_form = magic == XFS_DIR2_BLOCK_MAGIC;
		hdr = XFS_DIR2_DATA_HDR_LEN;
	}
	if (block_form) {
		/* Block form ends with the leaf array and the tail {count, stale}. */
		uint32_t count = be32(b + bs - 8);
		if (lblk != 0 || count > (bs - hdr - 8) / 8)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: bad block directory tail", ino);
		end = bs - 8 - 8 * count;
	}
	uint32_t p = hdr;
	int rc;
	while (p < end) {
		if (end - p < 8)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: entry at %u past the end", ino,
						 (unsigned long long)lblk, p);
		if (be16(b + p) == XFS_DIR2_DATA_FREE_TAG) {
			uint32_t len = be16(b + p + 2);
			if (len < 8 || (len & 7) || len > end - p || be16(b + p + len - 2) != p)
				return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: bad free entry at %u", ino,
							 (unsigned long long)lblk, p);
			p += len;
			continue;
		}
		uint64_t ci = be64(b + p);
		unsigned nl = b[p + 8];
		uint32_t len = (8 + 1 + nl + (x->ftype ? 1 : 0) + 2 + 7) & ~7u;
		if (nl == 0 || len > end - p || be16(b + p + len - 2) != p)
			return gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: block %llu: bad entry length at %u", ino,
						 (unsigned long long)lblk, p);
		if ((rc = check_ino(x, ip->ino, ci)))
			return rc;
		int ft = x->ftype ? dir_ftype(b[p + 9 + nl]) : GPUNVME_FT_UNKNOWN;
		if ((rc = cb(arg, (const char *)b + p + 9, nl, ci, ft)))
			return rc;
		p += len;
	}
	return 0;
}

/* Block, leaf and node directories: walk the data blocks (logical offsets
 * below XFS_DIR2_LEAF_OFFSET) through the directory's extent map; leaf and
 * free-index blocks above it carry no names. */
static int dir_blocks(struct gpunvme_fs *fs, const struct xinode *ip, gpunvme_dirent_cb cb, void *arg)
{
	const struct xfs *x = fs->priv;
	struct fs_extents e = { 0 };
	int rc = fork_extents(fs, ip, &e);
	uint8_t *b = NULL;
	if (rc)
		goto out;
	if (!(b = malloc(x->dirblksize))) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto out;
	}
	uint64_t bs = x->dirblksize, done = 0; /* dir blocks below `done` were read */
	for (size_t i = 0; i < e.n && !rc; i++) {
		const struct gpunvme_extent *xe = &e.v[i];
		uint64_t db = (xe->logical + bs - 1) / bs * bs;
		if (db < done)
			db = done;
		for (; db < xe->logical + xe->length && db < XFS_DIR2_LEAF_OFFSET && !rc; db += bs) {
			/* A directory block may span extents when dirblklog > 0. */
			uint64_t got = 0, daddr = 0;
			while (got < bs) {
				uint64_t contig = 0;
				int64_t ph = gpunvme_extent_map(e.v, e.n, db + got, &contig);
				if (ph < 0 || contig == 0) {
					rc = gpunvme_set_error(-EUCLEAN, "xfs: directory %llu: hole in directory block %llu",
							       (unsigned long long)ip->ino, (unsigned long long)(db / bs));
					break;
				}
				if (got == 0)
					daddr = (uint64_t)ph >> 9;
				uint64_t k = contig < bs - got ? contig : bs - got;
				if ((rc = fs_read(fs, (uint64_t)ph, b + got, (size_t)k)))
					break;
				got += k;
			}
			if (!rc)
				rc = dir_data_block(fs, ip, b, daddr, db / bs, cb, arg);
			done = db + bs;
		}
	}
out:
	free(b);
	free(e.v);
	return rc;
}

static int xfs_readdir(struct gpunvme_fs *fs, uint64_t ino, gpunvme_dirent_cb cb, void *arg)
{
	struct xinode in;
	int rc = read_inode(fs, ino, &in);
	if (rc)
		return rc;
	if ((in.mode & S_IFMT_) != S_IFDIR_)
		return gpunvme_set_error(-ENOTDIR, "xfs: inode %llu is not a directory", (unsigned long long)ino);
	if (in.format == XFS_DINODE_FMT_LOCAL)
		return dir_sf(fs, &in, cb, arg);
	return dir_blocks(fs, &in, cb, arg);
}

const struct gpunvme_fs_ops gpunvme_fs_xfs = {
	.name = "xfs",
	.probe = xfs_probe,
	.mount = xfs_mount,
	.unmount = xfs_unmount,
	.stat = xfs_stat,
	.readdir = xfs_readdir,
	.extents = xfs_extents,
	.read_inline = xfs_read_inline,
};
