/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Linux md superblocks and RAID0/linear assembly, read from the members.
 *
 * Formats (Linux include/uapi/linux/raid/md_p.h, drivers/md/md.c; mdadm
 * super1.c and super0.c):
 *   - version 1 (mdp_superblock_1, little-endian, 256 bytes + 2 bytes of
 *     role per possible device): 1.1 at sector 0, 1.2 at sector 8, 1.0 at
 *     (member sectors - 16) rounded down to a multiple of 8; super_offset
 *     records where it was written, which tells the three apart.
 *   - version 0.90 (mdp_super_t, 4096 bytes in 32-bit words, the writing
 *     host's byte order) in the last 64 KiB-aligned 64 KiB of the member;
 *     data from sector 0 up to the superblock.
 * RAID0 zones and sector mapping follow drivers/md/raid0.c: member sizes
 * rounded down to the chunk; zone 0 stripes over every member up to the
 * smallest, each further zone over the members still larger; the member of
 * a chunk is its chunk number modulo the zone's member count, counted from
 * the start of the array (layout 1, "original", kernels before 3.14) or of
 * the zone (layout 2, "alternate"). Linear: members end to end in slot order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gpunvme/md.h"

#define MD_MAGIC 0xa92b4efcu
#define SB_BYTES 4096u

/* v1 feature_map bits (md_p.h) */
#define F_BITMAP_OFFSET 0x1u
#define F_RECOVERY_OFFSET 0x2u
#define F_RESHAPE_ACTIVE 0x4u
#define F_BAD_BLOCKS 0x8u
#define F_REPLACEMENT 0x10u
#define F_RESHAPE_BACKWARDS 0x20u
#define F_NEW_OFFSET 0x40u
#define F_RECOVERY_BITMAP 0x80u
#define F_CLUSTERED 0x100u
#define F_JOURNAL 0x200u
#define F_PPL 0x400u
#define F_MULTIPLE_PPLS 0x800u
#define F_RAID0_LAYOUT 0x1000u
#define F_ALL 0x1fffu

/* 0.90 disk state bits (md_p.h MD_DISK_*) */
#define D_FAULTY 0
#define D_ACTIVE 1
#define D_SYNC 2

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p)
{
	return le32(p) | (uint64_t)le32(p + 4) << 32;
}
static uint16_t le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static const char *level_name(int32_t level, char *buf, size_t len)
{
	if (level == GPUNVME_MD_LEVEL_LINEAR)
		snprintf(buf, len, "linear");
	else if (level == -4)
		snprintf(buf, len, "multipath");
	else if (level == -5)
		snprintf(buf, len, "faulty");
	else if (level == -1000000)
		snprintf(buf, len, "container");
	else
		snprintf(buf, len, "raid%d", (int)level);
	return buf;
}

/* ---- version 1 -------------------------------------------------------------- */

/* 1 when a v1 superblock written for location `sector` is in b, 0 when not. */
static int v1_here(const uint8_t *b, uint64_t sector)
{
	return le32(b) == MD_MAGIC && le32(b + 4) == 1 && le64(b + 144) == sector;
}

static int v1_parse(const uint8_t *b, uint64_t dev_bytes, const char *ver, struct gpunvme_md_super *sb)
{
	uint32_t max_dev = le32(b + 220);
	/* the roles follow the 256-byte header; the kernel reads one 4 KiB block */
	if (max_dev > (SB_BYTES - 256) / 2)
		return gpunvme_set_error(-EUCLEAN, "md %s superblock: max_dev %u does not fit its 4 KiB", ver, max_dev);
	/* calc_sb_1_csum: 32-bit little-endian words summed into 64 bits with
	 * sb_csum taken as 0, a trailing 16-bit word added, carries folded once */
	size_t len = 256 + 2 * (size_t)max_dev;
	uint64_t sum = 0;
	size_t i;
	for (i = 0; i + 4 <= len; i += 4)
		sum += i == 216 ? 0 : le32(b + i);
	if (len - i == 2)
		sum += le16(b + i);
	uint32_t csum = (uint32_t)((sum & 0xffffffffu) + (sum >> 32));
	if (csum != le32(b + 216))
		return gpunvme_set_error(-EUCLEAN, "md %s superblock: checksum 0x%08x, computed 0x%08x (corrupt member?)", ver,
					 le32(b + 216), csum);
	uint32_t feat = le32(b + 8);
	if (feat & ~F_ALL)
		return gpunvme_set_error(-ENOTSUP, "md %s superblock: unknown feature bits 0x%x (newer than this reader)", ver,
					 feat & ~F_ALL);
	snprintf(sb->version, sizeof(sb->version), "%s", ver);
	memcpy(sb->uuid, b + 16, 16);
	memcpy(sb->name, b + 32, 32);
	sb->name[32] = 0;
	sb->level = (int32_t)le32(b + 72);
	sb->layout = le32(b + 76);
	uint64_t chunk = (uint64_t)le32(b + 88) * 512;
	if (chunk > UINT32_MAX)
		return gpunvme_set_error(-EUCLEAN, "md %s superblock: chunk of %llu bytes", ver, (unsigned long long)chunk);
	sb->chunk_bytes = (uint32_t)chunk;
	sb->raid_disks = le32(b + 92);
	sb->feature_map = feat;
	sb->reshaping = (feat & F_RESHAPE_ACTIVE) != 0;
	sb->layout_recorded = (feat & F_RAID0_LAYOUT) != 0;
	sb->events = le64(b + 200);
	sb->super_offset = le64(b + 144) * 512;
	uint64_t doff = le64(b + 128), dsize = le64(b + 136);
	if (doff > dev_bytes / 512 || dsize > dev_bytes / 512 - doff)
		return gpunvme_set_error(-EUCLEAN,
					 "md %s superblock: data at sector %llu, %llu sectors, past the end of a member of %llu "
					 "bytes (a truncated image?)",
					 ver, (unsigned long long)doff, (unsigned long long)dsize,
					 (unsigned long long)dev_bytes);
	sb->data_offset = doff * 512;
	sb->data_bytes = dsize * 512;
	uint32_t devnum = le32(b + 160);
	if (devnum >= max_dev)
		return gpunvme_set_error(-EUCLEAN, "md %s superblock: dev_number %u, max_dev %u", ver, devnum, max_dev);
	uint16_t role = le16(b + 256 + 2 * (size_t)devnum);
	/* MD_DISK_ROLE_SPARE / _FAULTY / _JOURNAL */
	sb->slot = role == 0xffff ? -1 : role == 0xfffe ? -2 : role == 0xfffd ? -3 : (int32_t)role;
	return 0;
}

/* ---- version 0.90 ----------------------------------------------------------- */

static int v0_parse(const uint8_t *b, uint64_t sb_off, struct gpunvme_md_super *sb)
{
	uint32_t w[SB_BYTES / 4];
	for (size_t i = 0; i < SB_BYTES / 4; i++)
		w[i] = le32(b + 4 * i);
	/* calc_sb_csum (md.c): the 1024 words summed into 64 bits with sb_csum
	 * (word 38) as 0, carries folded once */
	uint64_t sum = 0;
	for (size_t i = 0; i < SB_BYTES / 4; i++)
		sum += i == 38 ? 0 : w[i];
	uint32_t csum = (uint32_t)((sum & 0xffffffffu) + (sum >> 32));
	if (csum != w[38])
		return gpunvme_set_error(-EUCLEAN, "md 0.90 superblock: checksum 0x%08x, computed 0x%08x (corrupt member?)",
					 w[38], csum);
	snprintf(sb->version, sizeof(sb->version), "0.90");
	/* set_uuid0 (word 5), set_uuid1..3 (words 13-15) */
	memcpy(sb->uuid, b + 5 * 4, 4);
	memcpy(sb->uuid + 4, b + 13 * 4, 12);
	sb->name[0] = 0;
	sb->level = (int32_t)w[7];
	sb->raid_disks = w[10];
	sb->layout = w[64];
	sb->chunk_bytes = w[65];
	/* minor version 91: a reshape is in progress (reshape_position valid) */
	sb->reshaping = w[2] == 91;
	sb->feature_map = 0;
	sb->layout_recorded = 1; /* super_90_validate takes the layout word as it is */
	/* on a little-endian writer events_lo comes first */
	sb->events = (uint64_t)w[40] << 32 | w[39];
	sb->super_offset = sb_off;
	sb->data_offset = 0;
	sb->data_bytes = sb_off; /* super_90_load: the data ends where the superblock starts */
	/* this_disk (mdp_disk_t at word 992): number, major, minor, raid_disk, state */
	uint32_t raid_disk = w[992 + 3], state = w[992 + 4];
	if (state & 1u << D_FAULTY)
		sb->slot = -2;
	else if ((state & (1u << D_ACTIVE | 1u << D_SYNC)) != (1u << D_ACTIVE | 1u << D_SYNC))
		sb->slot = -1;
	else
		sb->slot = raid_disk > INT32_MAX ? -2 : (int32_t)raid_disk;
	return 0;
}

static int read_at(const struct gpunvme_blkdev *dev, uint64_t off, uint8_t *buf)
{
	return dev->read(dev->ctx, off, buf, SB_BYTES);
}

int gpunvme_md_examine(const struct gpunvme_blkdev *dev, struct gpunvme_md_super *sb)
{
	if (!dev || !dev->read || !sb)
		return gpunvme_set_error(-EINVAL, "md_examine: bad arguments");
	memset(sb, 0, sizeof(*sb));
	uint8_t *b = malloc(SB_BYTES);
	if (!b)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	uint64_t sectors = dev->size / 512;
	int rc, found = 0;
	/* 1.2 and 1.1 first (the versions mdadm makes by default), then the
	 * two that live at the end */
	static const struct {
		const char *ver;
		int kind; /* 0: sector 8, 1: sector 0, 2: v1.0 end, 3: 0.90 end */
	} where[] = { { "1.2", 0 }, { "1.1", 1 }, { "1.0", 2 }, { "0.90", 3 } };
	for (size_t k = 0; k < sizeof(where) / sizeof(where[0]) && !found; k++) {
		uint64_t sec;
		switch (where[k].kind) {
		case 0: sec = 8; break;
		case 1: sec = 0; break;
		case 2:
			/* super_1_load: sb_start = sectors - 16, rounded down to 4 KiB */
			if (sectors < 16 + 8)
				continue;
			sec = (sectors - 16) & ~(uint64_t)7;
			break;
		default:
			/* MD_NEW_SIZE_SECTORS: the last 64 KiB-aligned 64 KiB */
			if (sectors < 2 * 128)
				continue;
			sec = (sectors & ~(uint64_t)127) - 128;
			break;
		}
		if ((sec + 8) * 512 > dev->size)
			continue;
		if ((rc = read_at(dev, sec * 512, b)))
			goto out;
		if (where[k].kind != 3) {
			if (v1_here(b, sec)) {
				rc = v1_parse(b, dev->size, where[k].ver, sb);
				found = 1;
			} else if (le32(b) == MD_MAGIC && le32(b + 4) != 1 && le32(b + 4) != 0) {
				rc = gpunvme_set_error(-ENOTSUP, "md superblock of major version %u at sector %llu: only 0.90 "
								 "and 1.x are known",
						       le32(b + 4), (unsigned long long)sec);
				goto out;
			}
			continue;
		}
		if (le32(b) == MD_MAGIC) {
			uint32_t major = le32(b + 4), minor = le32(b + 8);
			if (major != 0 || (minor != 90 && minor != 91)) {
				rc = gpunvme_set_error(-ENOTSUP, "md superblock version %u.%u at the end of the member: only "
								 "0.90 and 1.x are known",
						       major, minor);
				goto out;
			}
			rc = v0_parse(b, sec * 512, sb);
			found = 1;
		} else if (b[0] == 0xa9 && b[1] == 0x2b && b[2] == 0x4e && b[3] == 0xfc) {
			rc = gpunvme_set_error(-ENOTSUP, "md 0.90 superblock written by a big-endian host: not supported "
							 "(convert it with mdadm --assemble --update=byteorder)");
			goto out;
		}
	}
	if (!found)
		rc = gpunvme_set_error(-EINVAL, "no md superblock (looked for metadata 1.2 at 4 KiB, 1.1 at 0, 1.0 and "
						"0.90 at the end)");
out:
	free(b);
	return rc;
}

/* ---- assembly ------------------------------------------------------------------- */

struct md_zone {
	uint64_t end;         /* array byte where the zone ends */
	uint64_t dev_start;   /* byte offset (after data_offset) on its members */
	uint32_t nb;          /* members in the zone */
	uint32_t first;       /* index into md->zone_dev */
};

struct gpunvme_md {
	struct gpunvme_md_info info;
	const struct gpunvme_blkdev *dev;     /* borrowed, indexed by member */
	uint32_t n;
	uint32_t slot_member[GPUNVME_MD_MAX_MEMBERS]; /* slot -> member */
	uint64_t doff[GPUNVME_MD_MAX_MEMBERS];        /* per slot */
	uint64_t bytes[GPUNVME_MD_MAX_MEMBERS];       /* per slot, after rounding */
	uint64_t lin_end[GPUNVME_MD_MAX_MEMBERS];     /* linear: array byte where slot ends */
	struct md_zone zone[GPUNVME_MD_MAX_MEMBERS];
	uint32_t zone_dev[GPUNVME_MD_MAX_MEMBERS * GPUNVME_MD_MAX_MEMBERS]; /* slots */
};

static void uuid_str(const uint8_t *u, char *s)
{
	/* mdadm prints 0.90 and 1.x UUIDs as four 32-bit groups */
	snprintf(s, 36, "%02x%02x%02x%02x:%02x%02x%02x%02x:%02x%02x%02x%02x:%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
		 u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* The array in messages: its name (v1), else its UUID */
static const char *alabel(const struct gpunvme_md_super *s, char *buf, size_t len)
{
	char u[40];
	if (s->name[0])
		return s->name;
	uuid_str(s->uuid, u);
	snprintf(buf, len, "%s", u);
	return buf;
}

static const char *mname(const char *const *names, size_t i, char *buf, size_t len)
{
	if (names && names[i])
		return names[i];
	snprintf(buf, len, "member %zu", i + 1);
	return buf;
}

int gpunvme_md_assemble(const struct gpunvme_blkdev *members, const char *const *names, size_t n,
			struct gpunvme_md **out)
{
	if (!members || !out || n == 0)
		return gpunvme_set_error(-EINVAL, "md_assemble: no members");
	if (n > GPUNVME_MD_MAX_MEMBERS)
		return gpunvme_set_error(-EINVAL, "md array of %zu members: at most %d", n, GPUNVME_MD_MAX_MEMBERS);
	struct gpunvme_md_super *sb = calloc(n, sizeof(*sb));
	struct gpunvme_md *md = calloc(1, sizeof(*md));
	char nb1[32], nb2[32], lv[32], u1[40], u2[40];
	int rc = 0;
	if (!sb || !md) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		if ((rc = gpunvme_md_examine(&members[i], &sb[i]))) {
			char why[256];
			snprintf(why, sizeof(why), "%s", gpunvme_last_error());
			rc = gpunvme_set_error(rc, "%s: %s", mname(names, i, nb1, sizeof(nb1)), why);
			goto fail;
		}
	}
	const struct gpunvme_md_super *s0 = &sb[0];
	for (size_t i = 1; i < n; i++) {
		if (memcmp(sb[i].uuid, s0->uuid, 16)) {
			uuid_str(s0->uuid, u1);
			uuid_str(sb[i].uuid, u2);
			rc = gpunvme_set_error(-EINVAL, "%s belongs to md array %s, %s to array %s: give the members of one array",
					       mname(names, 0, nb1, sizeof(nb1)), u1, mname(names, i, nb2, sizeof(nb2)), u2);
			goto fail;
		}
		if (strcmp(sb[i].version, s0->version) || sb[i].level != s0->level ||
		    sb[i].raid_disks != s0->raid_disks || sb[i].chunk_bytes != s0->chunk_bytes ||
		    sb[i].layout != s0->layout) {
			rc = gpunvme_set_error(-EUCLEAN, "%s and %s: superblocks of one array disagree (version, level, "
							 "member count, chunk or layout)",
					       mname(names, 0, nb1, sizeof(nb1)), mname(names, i, nb2, sizeof(nb2)));
			goto fail;
		}
	}
	if (s0->level != 0 && s0->level != GPUNVME_MD_LEVEL_LINEAR) {
		rc = gpunvme_set_error(-ENOTSUP, "md array %s is %s: only RAID0 and linear arrays can be read member by "
						 "member (other levels hold copies or parity); read it through the kernel's md "
						 "driver instead",
				       alabel(s0, u1, sizeof(u1)), level_name(s0->level, lv, sizeof(lv)));
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		if (sb[i].reshaping) {
			rc = gpunvme_set_error(-ENOTSUP, "%s: a reshape of this md array is in progress; let mdadm finish it "
							 "(mdadm --grow --continue) before reading the members",
					       mname(names, i, nb1, sizeof(nb1)));
			goto fail;
		}
		if (sb[i].slot < 0) {
			const char *what = sb[i].slot == -1 ? "a spare" : sb[i].slot == -2 ? "marked faulty" : "a journal";
			rc = gpunvme_set_error(-EINVAL, "%s is %s, not an active member of the array (degraded array?): "
							"give the active members only",
					       mname(names, i, nb1, sizeof(nb1)), what);
			goto fail;
		}
		if ((uint32_t)sb[i].slot >= s0->raid_disks) {
			rc = gpunvme_set_error(-EUCLEAN, "%s: slot %d of an array of %u members", mname(names, i, nb1, sizeof(nb1)),
					       (int)sb[i].slot, s0->raid_disks);
			goto fail;
		}
		if (sb[i].events != s0->events) {
			rc = gpunvme_set_error(-EINVAL, "%s has event count %llu, %s %llu: one of them missed the array's "
							"last update (stale member of a degraded array); reassemble it with mdadm",
					       mname(names, i, nb1, sizeof(nb1)), (unsigned long long)sb[i].events,
					       mname(names, 0, nb2, sizeof(nb2)), (unsigned long long)s0->events);
			goto fail;
		}
	}
	if (s0->raid_disks == 0 || s0->raid_disks > GPUNVME_MD_MAX_MEMBERS) {
		rc = gpunvme_set_error(-ENOTSUP, "md array of %u members: 1 to %d supported", s0->raid_disks,
				       GPUNVME_MD_MAX_MEMBERS);
		goto fail;
	}
	int have[GPUNVME_MD_MAX_MEMBERS];
	for (uint32_t k = 0; k < GPUNVME_MD_MAX_MEMBERS; k++)
		have[k] = -1;
	for (size_t i = 0; i < n; i++) {
		int32_t k = sb[i].slot;
		if (have[k] >= 0) {
			rc = gpunvme_set_error(-EINVAL, "%s and %s are both slot %d of the array (the same member given twice?)",
					       mname(names, (size_t)have[k], nb1, sizeof(nb1)), mname(names, i, nb2, sizeof(nb2)),
					       (int)k);
			goto fail;
		}
		have[k] = (int)i;
	}
	for (uint32_t k = 0; k < s0->raid_disks; k++) {
		if (have[k] < 0) {
			rc = gpunvme_set_error(-ENODEV, "md array %s: slot %u missing (%zu of %u members given): list every "
							"member, md:URI1;URI2;...",
					       alabel(s0, u1, sizeof(u1)), k, n, s0->raid_disks);
			goto fail;
		}
	}

	/* geometry */
	uint64_t chunk = s0->chunk_bytes;
	uint32_t lba = 512;
	if (s0->level == 0 && (chunk == 0 || chunk % 512)) {
		rc = gpunvme_set_error(-EUCLEAN, "md RAID0 with a chunk of %llu bytes", (unsigned long long)chunk);
		goto fail;
	}
	md->dev = members;
	md->n = (uint32_t)n;
	for (uint32_t k = 0; k < s0->raid_disks; k++) {
		size_t i = (size_t)have[k];
		md->slot_member[k] = (uint32_t)i;
		md->doff[k] = sb[i].data_offset;
		/* raid0.c and linear.c round each member down to the chunk */
		md->bytes[k] = chunk ? sb[i].data_bytes / chunk * chunk : sb[i].data_bytes;
		uint32_t l = members[i].lba_size ? members[i].lba_size : 512;
		if (l > lba)
			lba = l;
		if (sb[i].data_offset % l) {
			rc = gpunvme_set_error(-EUCLEAN, "%s: data offset %llu is not a multiple of its %u-byte blocks",
					       mname(names, i, nb1, sizeof(nb1)), (unsigned long long)sb[i].data_offset, l);
			goto fail;
		}
	}
	if (chunk % lba) {
		rc = gpunvme_set_error(-EINVAL, "md chunk of %llu bytes is not a multiple of the members' %u-byte blocks",
				       (unsigned long long)chunk, lba);
		goto fail;
	}
	uint32_t R = s0->raid_disks;
	uint64_t size = 0;
	if (s0->level == GPUNVME_MD_LEVEL_LINEAR) {
		for (uint32_t k = 0; k < R; k++) {
			size += md->bytes[k];
			md->lin_end[k] = size;
		}
		md->info.zones = 0;
		md->info.layout = 0;
	} else {
		/* create_strip_zones: zone 0 over every member up to the
		 * smallest; each next zone over the members larger than the
		 * previous zone's top, up to the smallest of them */
		uint64_t prev = 0;
		uint32_t nz = 0, used = 0;
		for (;;) {
			uint64_t smallest = UINT64_MAX;
			uint32_t c = 0;
			for (uint32_t k = 0; k < R; k++)
				if (md->bytes[k] > prev) {
					md->zone_dev[used + c++] = k;
					if (md->bytes[k] < smallest)
						smallest = md->bytes[k];
				}
			if (!c)
				break;
			size += (smallest - prev) * c;
			md->zone[nz] = (struct md_zone){ size, prev, c, used };
			used += c;
			nz++;
			prev = smallest;
		}
		if (nz == 0 || size == 0) {
			rc = gpunvme_set_error(-EUCLEAN, "md RAID0: members smaller than one chunk");
			goto fail;
		}
		md->info.zones = nz;
		uint32_t layout = s0->layout_recorded ? s0->layout : 0;
		if (nz == 1) {
			md->info.layout = 0; /* one zone: both layouts map alike */
		} else if (layout == 1 || layout == 2) {
			md->info.layout = layout;
		} else {
			rc = gpunvme_set_error(-ENOTSUP, "md RAID0 %s has members of different sizes (%u zones) but no layout "
							 "recorded: Linux 5.4+ refuses it too; record it with mdadm --assemble "
							 "--update=layout-original (array made before Linux 3.14) or "
							 "--update=layout-alternate",
					       alabel(s0, u1, sizeof(u1)), nz);
			goto fail;
		}
	}
	snprintf(md->info.version, sizeof(md->info.version), "%s", s0->version);
	memcpy(md->info.uuid, s0->uuid, 16);
	memcpy(md->info.name, s0->name, sizeof(md->info.name));
	md->info.level = s0->level;
	md->info.chunk_bytes = s0->chunk_bytes;
	md->info.n_members = R;
	md->info.size = size;
	md->info.lba_size = lba;
	free(sb);
	*out = md;
	return 0;
fail:
	free(sb);
	free(md);
	return rc;
}

void gpunvme_md_close(struct gpunvme_md *md)
{
	free(md);
}

void gpunvme_md_info(const struct gpunvme_md *md, struct gpunvme_md_info *info)
{
	*info = md->info;
}

int gpunvme_md_member(const struct gpunvme_md *md, uint32_t slot, uint32_t *member, uint64_t *data_offset,
		      uint64_t *bytes)
{
	if (!md || slot >= md->info.n_members)
		return gpunvme_set_error(-ERANGE, "md: no slot %u", slot);
	if (member)
		*member = md->slot_member[slot];
	if (data_offset)
		*data_offset = md->doff[slot];
	if (bytes)
		*bytes = md->bytes[slot];
	return 0;
}

int gpunvme_md_map(const struct gpunvme_md *md, uint64_t off, uint32_t *member, uint64_t *member_off,
		   uint64_t *contig)
{
	if (off >= md->info.size)
		return gpunvme_set_error(-ERANGE, "md: byte %llu is past the end of the array (%llu bytes)",
					 (unsigned long long)off, (unsigned long long)md->info.size);
	uint32_t slot;
	uint64_t moff = 0, run = 0;
	if (md->info.level == GPUNVME_MD_LEVEL_LINEAR) {
		uint32_t k = 0;
		while (off >= md->lin_end[k])
			k++;
		uint64_t start = md->lin_end[k] - md->bytes[k];
		slot = k;
		moff = off - start;
		run = md->lin_end[k] - off;
	} else {
		const uint64_t C = md->info.chunk_bytes;
		uint32_t z = 0;
		while (off >= md->zone[z].end)
			z++;
		const struct md_zone *zn = &md->zone[z];
		uint64_t zstart = z ? md->zone[z - 1].end : 0, zoff = off - zstart;
		/* raid0.c map_sector: the member is the chunk number modulo
		 * the zone's member count; layout 1 counts chunks from the
		 * start of the array (the pre-3.14 mapping), layout 2 (and a
		 * single zone, where both agree) from the start of the zone */
		uint64_t chunkno = (md->info.layout == 1 ? off : zoff) / C;
		uint64_t in_chunk = off % C; /* zone starts are chunk multiples */
		slot = md->zone_dev[zn->first + (uint32_t)(chunkno % zn->nb)];
		moff = zn->dev_start + zoff / (C * zn->nb) * C + in_chunk;
		run = C - in_chunk;
		if (run > zn->end - off)
			run = zn->end - off;
	}
	if (member)
		*member = md->slot_member[slot];
	if (member_off)
		*member_off = md->doff[slot] + moff;
	if (contig)
		*contig = run;
	return 0;
}

static int md_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct gpunvme_md *md = ctx;
	if (off > md->info.size || len > md->info.size - off)
		return gpunvme_set_error(-EIO, "md array: read of %zu bytes at %llu is past the end (%llu bytes)", len,
					 (unsigned long long)off, (unsigned long long)md->info.size);
	uint8_t *p = buf;
	while (len) {
		uint32_t m = 0;
		uint64_t moff = 0, run = 0;
		int rc = gpunvme_md_map(md, off, &m, &moff, &run);
		if (rc)
			return rc;
		size_t k = run < len ? (size_t)run : len;
		const struct gpunvme_blkdev *d = &md->dev[m];
		if ((rc = d->read(d->ctx, moff, p, k)))
			return rc;
		p += k;
		off += k;
		len -= k;
	}
	return 0;
}

static void md_release(void *ctx)
{
	struct gpunvme_md *md = ctx;
	for (uint32_t i = 0; i < md->n; i++)
		if (md->dev[i].release)
			md->dev[i].release(md->dev[i].ctx);
}

static void md_noclose(void *ctx)
{
	(void)ctx;
}

void gpunvme_md_blkdev(struct gpunvme_md *md, struct gpunvme_blkdev *out)
{
	*out = (struct gpunvme_blkdev){ md_read, md_noclose, md, md->info.size, md->info.lba_size, md_release };
}

/* ---- extents -------------------------------------------------------------------- */

struct vec {
	void *v;
	size_t n, cap, sz;
};

static void *vec_push(struct vec *x)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 64;
		void *p = realloc(x->v, cap * x->sz);
		if (!p)
			return NULL;
		x->v = p;
		x->cap = cap;
	}
	return (uint8_t *)x->v + x->n++ * x->sz;
}

int gpunvme_md_split_extents(const struct gpunvme_md *md, const struct gpunvme_extent *ext, size_t n,
			     struct gpunvme_md_extent **out, size_t *nout)
{
	struct vec v = { NULL, 0, 0, sizeof(struct gpunvme_md_extent) };
	for (size_t i = 0; i < n; i++) {
		uint64_t lo = ext[i].logical, ph = ext[i].physical, left = ext[i].length;
		while (left) {
			uint32_t m = 0;
			uint64_t moff = 0, run = 0;
			int rc = gpunvme_md_map(md, ph, &m, &moff, &run);
			if (rc) {
				free(v.v);
				return gpunvme_set_error(rc, "md: extent at file byte %llu maps past the array (%llu bytes)",
							 (unsigned long long)lo, (unsigned long long)md->info.size);
			}
			if (run > left)
				run = left;
			struct gpunvme_md_extent *prev = v.n ? (struct gpunvme_md_extent *)v.v + v.n - 1 : NULL;
			if (prev && prev->member == m && prev->flags == ext[i].flags && prev->logical + prev->length == lo &&
			    prev->physical + prev->length == moff) {
				prev->length += run;
			} else {
				struct gpunvme_md_extent *e = vec_push(&v);
				if (!e) {
					free(v.v);
					return gpunvme_set_error(-ENOMEM, "out of memory");
				}
				*e = (struct gpunvme_md_extent){ lo, moff, run, ext[i].flags, m };
			}
			lo += run;
			ph += run;
			left -= run;
		}
	}
	*out = v.v;
	*nout = v.n;
	return 0;
}

static int push_ext(struct vec *v, uint64_t lo, uint64_t ph, uint64_t len, uint32_t flags)
{
	if (!len)
		return 0;
	struct gpunvme_extent *prev = v->n ? (struct gpunvme_extent *)v->v + v->n - 1 : NULL;
	if (prev && prev->flags == flags && prev->logical + prev->length == lo &&
	    (flags || prev->physical + prev->length == ph)) {
		prev->length += len;
		return 0;
	}
	struct gpunvme_extent *e = vec_push(v);
	if (!e)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	*e = (struct gpunvme_extent){ lo, flags ? 0 : ph, len, flags };
	return 0;
}

int gpunvme_md_member_extents(const struct gpunvme_md *md, const struct gpunvme_extent *ext, size_t n,
			      uint64_t file_size, uint32_t member, struct gpunvme_extent **out, size_t *nout)
{
	if (member >= md->n)
		return gpunvme_set_error(-ERANGE, "md: no member %u", member);
	struct gpunvme_md_extent *pieces = NULL;
	size_t np = 0;
	int rc = gpunvme_md_split_extents(md, ext, n, &pieces, &np);
	if (rc)
		return rc;
	struct vec v = { NULL, 0, 0, sizeof(struct gpunvme_extent) };
	const uint32_t E = GPUNVME_EXTENT_ELSEWHERE;
	uint64_t at = 0; /* file bytes covered so far */
	for (size_t i = 0; i < np && !rc; i++) {
		const struct gpunvme_md_extent *p = &pieces[i];
		/* a hole before this piece: member 0 zero-fills it */
		if (p->logical > at && member != 0)
			rc = push_ext(&v, at, 0, p->logical - at, E);
		if (rc)
			break;
		if (p->flags & GPUNVME_EXTENT_UNWRITTEN)
			rc = push_ext(&v, p->logical, 0, p->length, member == 0 ? GPUNVME_EXTENT_UNWRITTEN : E);
		else if (p->member == member)
			rc = push_ext(&v, p->logical, p->physical, p->length, 0);
		else
			rc = push_ext(&v, p->logical, 0, p->length, E);
		if (p->logical + p->length > at)
			at = p->logical + p->length;
	}
	if (!rc && at < file_size && member != 0)
		rc = push_ext(&v, at, 0, file_size - at, E);
	free(pieces);
	if (rc) {
		free(v.v);
		return rc;
	}
	*out = v.v;
	*nout = v.n;
	return 0;
}
