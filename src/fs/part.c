/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Partition tables: GPT (UEFI Specification 2.10 §5.3 "GUID Partition Table
 * (GPT) Disk Layout") and MBR (§5.2 "LBA 0 Format"; extended partitions
 * through their chain of EBRs, as Linux's block/partitions/msdos.c numbers
 * them), and locating the ext4/XFS file system on a disk.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fs/fs_internal.h"
#include "gpunvme/part.h"

#define GPT_HDR_MIN 92u              /* §5.3.2 Table 5-5: the defined fields */
#define GPT_ENTRY_MIN 128u           /* SizeOfPartitionEntry = 128 * 2^n */
#define GPT_ARRAY_MAX (4u << 20)     /* bytes: 32x the usual 16 KiB; bounds a hostile count */
#define MBR_LOGICAL_MAX 256u         /* EBRs followed: Linux stops far earlier in practice */

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* CRC32 as GPT uses it (§5.3.2: "CRC32", the IEEE 802.3 polynomial,
 * reflected, initial and final XOR 0xffffffff). Tables are for hot paths;
 * a table is at most a few MiB once per open. */
static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
	}
	return ~c;
}

struct plist {
	struct gpunvme_partition *v;
	size_t n, cap;
};

static int plist_push(struct plist *l, const struct gpunvme_partition *p)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct gpunvme_partition *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return gpunvme_set_error(-ENOMEM, "out of memory");
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = *p;
	return 0;
}

static int dev_read(const struct gpunvme_blkdev *dev, uint64_t off, void *buf, size_t len)
{
	if (off > dev->size || len > dev->size - off)
		return gpunvme_set_error(-EIO, "partition table: read of %zu bytes at %" PRIu64
					 " is past the end of the device (%" PRIu64 " bytes)", len, off, dev->size);
	return dev->read(dev->ctx, off, buf, len);
}

/* ---- GPT ---------------------------------------------------------------------- */

static void guid_str(const uint8_t *g, char *out, size_t len)
{
	/* §Appendix A: the first three fields are little-endian on disk */
	snprintf(out, len, "%08" PRIx32 "-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x", le32(g), le16(g + 4),
		 le16(g + 6), g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
}

/* UTF-16LE (36 units, NUL-terminated or full) -> UTF-8; a lone surrogate
 * becomes U+FFFD. */
static void name_utf8(const uint8_t *u, char *out, size_t len)
{
	size_t o = 0;
	for (unsigned i = 0; i < 36; i++) {
		uint32_t c = le16(u + 2 * i);
		if (c == 0)
			break;
		if (c >= 0xd800 && c < 0xdc00 && i + 1 < 36) {
			uint32_t d = le16(u + 2 * i + 2);
			if (d >= 0xdc00 && d < 0xe000) {
				c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
				i++;
			} else {
				c = 0xfffd;
			}
		} else if (c >= 0xd800 && c < 0xe000) {
			c = 0xfffd;
		}
		char b[4];
		size_t k;
		if (c < 0x80) {
			b[0] = (char)c;
			k = 1;
		} else if (c < 0x800) {
			b[0] = (char)(0xc0 | c >> 6);
			b[1] = (char)(0x80 | (c & 0x3f));
			k = 2;
		} else if (c < 0x10000) {
			b[0] = (char)(0xe0 | c >> 12);
			b[1] = (char)(0x80 | ((c >> 6) & 0x3f));
			b[2] = (char)(0x80 | (c & 0x3f));
			k = 3;
		} else {
			b[0] = (char)(0xf0 | c >> 18);
			b[1] = (char)(0x80 | ((c >> 12) & 0x3f));
			b[2] = (char)(0x80 | ((c >> 6) & 0x3f));
			b[3] = (char)(0x80 | (c & 0x3f));
			k = 4;
		}
		if (o + k >= len)
			break;
		memcpy(out + o, b, k);
		o += k;
	}
	out[o] = 0;
}

/* One GPT header at `lba` and its entry array, checked as §5.3.2 says a
 * header must be before use: signature, HeaderSize, HeaderCRC32, MyLBA,
 * then the entry array's CRC32. 0, -ENODATA (no GPT signature there) or
 * -EUCLEAN with the reason. */
static int gpt_read(const struct gpunvme_blkdev *dev, uint64_t lba, struct plist *out)
{
	uint32_t bs = dev->lba_size;
	uint64_t nblk = dev->size / bs;
	uint8_t *h = malloc(bs);
	if (!h)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	int rc = dev_read(dev, lba * bs, h, bs);
	if (rc)
		goto out;
	if (memcmp(h, "EFI PART", 8)) {
		rc = -ENODATA;
		goto out;
	}
	uint32_t hsz = le32(h + 12);
	if (hsz < GPT_HDR_MIN || hsz > bs) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 ": HeaderSize %" PRIu32 " (92 to %" PRIu32 ")",
				       lba, hsz, bs);
		goto out;
	}
	uint32_t crc = le32(h + 16);
	memset(h + 16, 0, 4);
	if (crc32_ieee(h, hsz) != crc) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 ": header CRC32 mismatch", lba);
		goto out;
	}
	uint64_t my = le64(h + 24), first = le64(h + 40), last = le64(h + 48), elba = le64(h + 72);
	uint32_t count = le32(h + 80), esz = le32(h + 84), acrc = le32(h + 88);
	if (my != lba) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 " says it is at LBA %" PRIu64, lba, my);
		goto out;
	}
	if (esz < GPT_ENTRY_MIN || (esz & (esz - 1)) || esz > bs) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 ": SizeOfPartitionEntry %" PRIu32
					 " (128 * 2^n, at most one block)", lba, esz);
		goto out;
	}
	uint64_t abytes = (uint64_t)count * esz;
	if (abytes > GPT_ARRAY_MAX || elba >= nblk || abytes > (nblk - elba) * (uint64_t)bs) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 ": %" PRIu32 " entries of %" PRIu32
					 " bytes at LBA %" PRIu64 " do not fit the device", lba, count, esz, elba);
		goto out;
	}
	if (first > last || last >= nblk) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 ": usable LBAs %" PRIu64 "..%" PRIu64
					 " outside the device (%" PRIu64 " blocks)", lba, first, last, nblk);
		goto out;
	}
	uint8_t *a = malloc(abytes ? (size_t)abytes : 1);
	if (!a) {
		rc = gpunvme_set_error(-ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = dev_read(dev, elba * bs, a, (size_t)abytes)))
		goto out_a;
	if (crc32_ieee(a, (size_t)abytes) != acrc) {
		rc = gpunvme_set_error(-EUCLEAN, "GPT header at LBA %" PRIu64 ": partition entry array CRC32 mismatch", lba);
		goto out_a;
	}
	static const uint8_t zero[16];
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *e = a + (size_t)i * esz;
		if (!memcmp(e, zero, 16))
			continue; /* §5.3.3: an all-zero type GUID is an unused entry */
		uint64_t s = le64(e + 32), t = le64(e + 40);
		if (s > t || t > last || s < first) {
			rc = gpunvme_set_error(-EUCLEAN, "GPT entry %" PRIu32 ": LBAs %" PRIu64 "..%" PRIu64
						 " outside the usable %" PRIu64 "..%" PRIu64, i + 1, s, t, first, last);
			goto out_a;
		}
		struct gpunvme_partition p = { .number = i + 1, .offset = s * bs, .size = (t - s + 1) * bs };
		char g[40];
		guid_str(e, g, sizeof(g));
		snprintf(p.type, sizeof(p.type), "gpt:%s", g);
		name_utf8(e + 56, p.name, sizeof(p.name));
		if ((rc = plist_push(out, &p)))
			goto out_a;
	}
out_a:
	free(a);
out:
	free(h);
	return rc;
}

/* ---- MBR ---------------------------------------------------------------------- */

static bool mbr_extended(uint8_t t) { return t == 0x05 || t == 0x0f || t == 0x85; }

/* A boot sector is an MBR only with the 0x55AA signature and sane status
 * bytes (0x00 or 0x80): a file system's first sector rarely has both. */
static bool mbr_valid(const uint8_t *s)
{
	if (s[510] != 0x55 || s[511] != 0xaa)
		return false;
	for (int i = 0; i < 4; i++)
		if (s[446 + 16 * i] & 0x7f)
			return false;
	return true;
}

static int mbr_logicals(const struct gpunvme_blkdev *dev, uint64_t ext_start, uint64_t ext_len, struct plist *out)
{
	uint32_t bs = dev->lba_size;
	uint8_t s[512];
	uint64_t ebr = ext_start;  /* LBA of the current EBR */
	uint32_t number = 5;
	for (unsigned k = 0;; k++) {
		if (k >= MBR_LOGICAL_MAX)
			return gpunvme_set_error(-EUCLEAN, "MBR: more than %u logical partitions (an EBR loop?)",
						 MBR_LOGICAL_MAX);
		int rc = dev_read(dev, ebr * bs, s, sizeof(s));
		if (rc)
			return rc;
		if (s[510] != 0x55 || s[511] != 0xaa)
			return gpunvme_set_error(-EUCLEAN, "MBR: extended boot record at LBA %" PRIu64 " has no 0x55AA signature",
						 ebr);
		const uint8_t *e1 = s + 446, *e2 = s + 462;
		uint64_t st = le32(e1 + 8), len = le32(e1 + 12);
		if (e1[4] && len) {
			/* the logical partition starts relative to its EBR */
			if (ebr + st + len > ext_start + ext_len || ebr + st + len > dev->size / bs)
				return gpunvme_set_error(-EUCLEAN, "MBR: logical partition %" PRIu32 " runs past its extended "
							 "partition", number);
			struct gpunvme_partition p = { .number = number, .offset = (ebr + st) * bs, .size = len * bs };
			snprintf(p.type, sizeof(p.type), "mbr:0x%02x", e1[4]);
			if ((rc = plist_push(out, &p)))
				return rc;
		}
		number++;
		uint64_t next = le32(e2 + 8);
		if (!mbr_extended(e2[4]) || next == 0)
			return 0;
		/* the next EBR is relative to the extended partition, and it
		 * must move forward: that alone ends every loop */
		if (ext_start + next <= ebr || next >= ext_len)
			return gpunvme_set_error(-EUCLEAN, "MBR: EBR at LBA %" PRIu64 " links to LBA %" PRIu64
						 " (backwards or outside the extended partition: a loop)", ebr, ext_start + next);
		ebr = ext_start + next;
	}
}

static int mbr_read(const struct gpunvme_blkdev *dev, const uint8_t *s, struct plist *out)
{
	uint32_t bs = dev->lba_size;
	uint64_t nblk = dev->size / bs;
	bool ext_seen = false;
	for (uint32_t i = 0; i < 4; i++) {
		const uint8_t *e = s + 446 + 16 * i;
		uint64_t st = le32(e + 8), len = le32(e + 12);
		if (!e[4] || !len)
			continue;
		if (st + len > nblk)
			return gpunvme_set_error(-EUCLEAN, "MBR: partition %" PRIu32 " (LBAs %" PRIu64 "+%" PRIu64
						 ") runs past the end of the device (%" PRIu64 " blocks)", i + 1, st, len, nblk);
		if (mbr_extended(e[4])) {
			if (ext_seen)
				continue; /* Linux follows the first one only */
			ext_seen = true;
			int rc = mbr_logicals(dev, st, len, out);
			if (rc)
				return rc;
			continue;
		}
		struct gpunvme_partition p = { .number = i + 1, .offset = st * bs, .size = len * bs };
		snprintf(p.type, sizeof(p.type), "mbr:0x%02x", e[4]);
		int rc = plist_push(out, &p);
		if (rc)
			return rc;
	}
	return 0;
}

static int cmp_num(const void *a, const void *b)
{
	const struct gpunvme_partition *x = a, *y = b;
	return (x->number > y->number) - (x->number < y->number);
}

int gpunvme_part_list(const struct gpunvme_blkdev *dev, struct gpunvme_partition **parts, size_t *n,
		      const char **scheme)
{
	if (!dev || !parts || !n || !scheme)
		return gpunvme_set_error(-EINVAL, "part_list: bad arguments");
	*parts = NULL;
	*n = 0;
	*scheme = "none";
	uint32_t bs = dev->lba_size;
	if (bs < 512 || bs > 65536 || (bs & (bs - 1)))
		return gpunvme_set_error(-EINVAL, "part_list: LBA size %" PRIu32 " (a power of two, 512 to 65536)", bs);
	if (dev->size < 2ull * bs)
		return 0;
	uint8_t s[512];
	int rc = dev_read(dev, 0, s, sizeof(s));
	if (rc)
		return rc;
	bool mbr = mbr_valid(s), protective = false;
	for (int i = 0; mbr && i < 4; i++)
		protective |= s[446 + 16 * i + 4] == 0xee;
	struct plist l = { 0 };
	/* §5.3.1: GPT at LBA 1; the backup header at the last LBA when the
	 * primary is corrupt (its own note survives a success) */
	rc = gpt_read(dev, 1, &l);
	if (rc && rc != -ENODATA && rc != -ENOMEM) {
		char why[256];
		snprintf(why, sizeof(why), "%s", gpunvme_last_error());
		l.n = 0;
		int rb = gpt_read(dev, dev->size / bs - 1, &l);
		if (rb == 0) {
			gpunvme_set_error(0, "note: the primary GPT is corrupt (%s); the backup GPT at the last LBA was used",
					  why);
			rc = 0;
		} else {
			free(l.v);
			return gpunvme_set_error(-EUCLEAN, "both GPT headers are corrupt: primary: %s; backup: %s", why,
						 rb == -ENODATA ? "no GPT signature at the last LBA" : gpunvme_last_error());
		}
	} else if (rc == -ENODATA && protective) {
		/* a protective MBR with no primary header: the backup may still be there */
		l.n = 0;
		int rb = gpt_read(dev, dev->size / bs - 1, &l);
		if (rb) {
			free(l.v);
			/* a table written for other LBAs: its header is at
			 * byte 512 or 4096, not at this LBA 1 */
			uint8_t sig[8];
			uint64_t other = bs == 512 ? 4096 : 512;
			bool moved = dev_read(dev, other, sig, 8) == 0 && !memcmp(sig, "EFI PART", 8);
			return gpunvme_set_error(-EUCLEAN, "a protective MBR (type 0xEE) but no valid GPT header at LBA 1 "
							   "or at the last LBA (%" PRIu32 "-byte LBAs)%s", bs,
						 moved ? other == 4096 ? ": there is one at byte 4096, written for 4096-byte LBAs"
								       : ": there is one at byte 512, written for 512-byte LBAs"
						       : "");
		}
		gpunvme_set_error(0, "note: no primary GPT header; the backup GPT at the last LBA was used");
		rc = 0;
	}
	if (rc == 0) {
		if (l.n > 1) /* qsort of a NULL array is undefined (C11 7.22.5) */
			qsort(l.v, l.n, sizeof(*l.v), cmp_num);
		*scheme = "gpt";
	} else if (rc == -ENODATA && mbr) {
		if ((rc = mbr_read(dev, s, &l))) {
			free(l.v);
			return rc;
		}
		if (l.n > 1) /* qsort of a NULL array is undefined (C11 7.22.5) */
			qsort(l.v, l.n, sizeof(*l.v), cmp_num);
		*scheme = "mbr";
	} else if (rc == -ENODATA) {
		return 0;
	} else {
		free(l.v);
		return rc;
	}
	if (l.n == 0) {
		free(l.v);
		l.v = NULL;
	}
	*parts = l.v;
	*n = l.n;
	return 0;
}

/* ---- locating the file system -------------------------------------------------- */

static void describe(char *buf, size_t len, const struct gpunvme_partition *p, size_t n, const char *const *fs)
{
	size_t o = 0;
	buf[0] = 0;
	for (size_t i = 0; i < n && o < len; i++) {
		int k = snprintf(buf + o, len - o, "%s%" PRIu32 ": %s at byte %" PRIu64 ", %" PRIu64 " bytes%s%s",
				 i ? "; " : "", p[i].number, fs && fs[i] ? fs[i] : p[i].type, p[i].offset, p[i].size,
				 p[i].name[0] ? ", name " : "", p[i].name);
		if (k < 0)
			break;
		o += (size_t)k;
	}
	if (o >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
}

int gpunvme_fs_locate(const struct gpunvme_blkdev *dev, uint32_t partno, uint64_t *offset)
{
	if (!dev || !offset)
		return gpunvme_set_error(-EINVAL, "fs_locate: bad arguments");
	const char *t = NULL;
	if (partno == 0 && fs_probe_at(dev, 0, &t) == 1) {
		*offset = 0;
		return 0;
	}
	struct gpunvme_partition *p = NULL;
	size_t n = 0;
	const char *scheme = "none";
	int rc = gpunvme_part_list(dev, &p, &n, &scheme);
	if (rc)
		return rc;
	char list[1024];
	if (partno) {
		for (size_t i = 0; i < n; i++)
			if (p[i].number == partno) {
				*offset = p[i].offset;
				free(p);
				return 0;
			}
		describe(list, sizeof(list), p, n, NULL);
		free(p);
		if (!strcmp(scheme, "none"))
			return gpunvme_set_error(-ENOENT, "no partition %" PRIu32 ": the device has no partition table "
							  "(GPT or MBR); give --offset BYTES if the file system is not at byte 0",
						 partno);
		return gpunvme_set_error(-ENOENT, "no partition %" PRIu32 "; the %s table has: %s", partno, scheme,
					 n ? list : "no partitions");
	}
	const char **fs = calloc(n ? n : 1, sizeof(*fs));
	if (!fs) {
		free(p);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	size_t hits = 0, hit = 0;
	for (size_t i = 0; i < n; i++)
		if (fs_probe_at(dev, p[i].offset, &fs[i]) == 1 && p[i].size >= 1024) {
			hits++;
			hit = i;
		} else {
			fs[i] = NULL;
		}
	if (hits == 1) {
		*offset = p[hit].offset;
		rc = 0;
	} else if (hits > 1) {
		struct gpunvme_partition *q = malloc(hits * sizeof(*q));
		const char **qf = malloc(hits * sizeof(*qf));
		size_t k = 0;
		for (size_t i = 0; q && qf && i < n; i++)
			if (fs[i]) {
				q[k] = p[i];
				q[k].name[0] = 0;
				qf[k++] = fs[i];
			}
		describe(list, sizeof(list), q ? q : p, q && qf ? k : 0, qf);
		free(q);
		free(qf);
		rc = gpunvme_set_error(-EINVAL, "%zu partitions hold file systems (%s): choose one with --partition N",
				       hits, list);
	} else if (!strcmp(scheme, "none")) {
		rc = gpunvme_set_error(-EINVAL, "no ext4 or XFS file system at byte 0 and no partition table (GPT or MBR):"
					       " if the file system starts elsewhere, give --offset BYTES");
	} else {
		describe(list, sizeof(list), p, n, NULL);
		rc = gpunvme_set_error(-EINVAL, "a %s partition table with %zu partition%s (%s), none holding an ext4 or "
					       "XFS file system: give --partition N or --offset BYTES",
				       scheme, n, n == 1 ? "" : "s", n ? list : "none");
	}
	free(fs);
	free(p);
	return rc;
}
