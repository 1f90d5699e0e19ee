/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Block sources for the file system decoders: an image file (or a kernel
 * block device) read with pread, and a namespace read through the user-space
 * driver. Decoders ask for arbitrary byte ranges (a 16-byte extent record, a
 * 1 KiB superblock at byte 1024); the namespace source turns each into whole
 * LBA reads through a DMA bounce buffer and copies the wanted bytes out.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/fs.h>

#include "base/base.h"
#include "gpunvme/extents.h"

/* ---- image files and block devices --------------------------------------- */

struct file_src {
	int fd;
	uint64_t size;
	char path[256];
};

static int file_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct file_src *f = ctx;
	if (off > f->size || len > f->size - off)
		return gpunvme_set_error(-EIO, "%s: read of %zu bytes at %llu is past the end (%llu bytes)", f->path,
					 len, (unsigned long long)off, (unsigned long long)f->size);
	uint8_t *p = buf;
	while (len) {
		/* pread takes off_t: bounded above by the size check */
		ssize_t r = pread(f->fd, p, len, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			return gpunvme_set_error(-e, "%s: pread at %llu: %s", f->path, (unsigned long long)off,
						 strerror(e));
		}
		if (r == 0) /* the file shrank under us */
			return gpunvme_set_error(-EIO, "%s: unexpected end of file at %llu", f->path,
						 (unsigned long long)off);
		p += r;
		off += (uint64_t)r;
		len -= (size_t)r;
	}
	return 0;
}

static void file_close(void *ctx)
{
	struct file_src *f = ctx;
	close(f->fd);
	free(f);
}

int gpunvme_blkdev_open_file(const char *path, struct gpunvme_blkdev *out)
{
	if (!path || !out)
		return gpunvme_set_error(-EINVAL, "blkdev_open_file: bad arguments");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return gpunvme_set_error(-e, "%s: %s", path, strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		return gpunvme_set_error(-e, "%s: fstat: %s", path, strerror(e));
	}
	uint64_t size;
	uint32_t lba = 512;
	if (S_ISBLK(st.st_mode)) {
		/* st_size is 0 for block devices: ask the kernel */
		if (ioctl(fd, BLKGETSIZE64, &size)) {
			int e = errno;
			close(fd);
			return gpunvme_set_error(-e, "%s: BLKGETSIZE64: %s", path, strerror(e));
		}
		int ssz = 0;
		if (!ioctl(fd, BLKSSZGET, &ssz) && ssz > 0)
			lba = (uint32_t)ssz;
	} else if (S_ISREG(st.st_mode)) {
		size = (uint64_t)st.st_size;
	} else {
		close(fd);
		return gpunvme_set_error(-EINVAL, "%s: neither a regular file nor a block device", path);
	}
	struct file_src *f = calloc(1, sizeof(*f));
	if (!f) {
		close(fd);
		return gpunvme_set_error(-ENOMEM, "out of memory");
	}
	f->fd = fd;
	f->size = size;
	snprintf(f->path, sizeof(f->path), "%s", path);
	*out = (struct gpunvme_blkdev){ file_read, file_close, f, size, lba };
	return 0;
}

/* ---- namespaces through the user-space driver ------------------------------ */

/*
 * Decoders make many small reads close to one another (inodes of one
 * cluster, directory blocks, btree nodes), and every command costs a round
 * trip to the controller. The 1 MiB DMA bounce buffer doubles as a cache of
 * NS_WINDOWS aligned windows of NS_WINDOW bytes (least recently used
 * replaced); a read larger than a window bypasses the cache and uses the
 * whole buffer. The source is read-only and a file system being decoded
 * must not change under us anyway (it is not mounted), so nothing is ever
 * invalidated except by the bypass, which overwrites the buffer.
 */
#define NS_BOUNCE (1u << 20)
#define NS_WINDOW (128u << 10)
#define NS_WINDOWS (NS_BOUNCE / NS_WINDOW)

struct ns_src {
	struct gpunvme_ctrl *c;
	struct gpunvme_qpair *qp;
	uint32_t nsid;
	uint32_t lba_size, lba_shift;
	uint64_t nsze;
	uint8_t *bounce;     /* DMA memory, NS_BOUNCE bytes */
	uint32_t bounce_lbas;
	struct {
		uint64_t off;    /* byte offset of the window, NS_WINDOW aligned */
		uint32_t len;    /* valid bytes (short at the end of the namespace); 0 = empty */
		uint64_t used;   /* LRU clock */
	} win[NS_WINDOWS];
	uint64_t clock;
};

/* synchronous reads: one command at a time is all a decoder needs */
static int ns_queue(struct ns_src *s)
{
	struct gpunvme_ctrl_info ci;
	int rc = gpunvme_ctrl_info(s->c, &ci);
	if (!rc)
		rc = gpunvme_qpair_create(s->c, ci.mqes < 4 ? ci.mqes : 4, &s->qp);
	return rc;
}

static void ns_release(void *ctx)
{
	struct ns_src *s = ctx;
	gpunvme_qpair_destroy(s->qp);
	s->qp = NULL;
}

static int ns_cmd(struct ns_src *s, void *buf, uint64_t slba, uint32_t nlb)
{
	uint16_t status = 0;
	int rc = s->qp ? 0 : ns_queue(s);
	if (rc)
		return rc;
	rc = gpunvme_read_sync(s->qp, s->nsid, buf, slba, nlb, &status);
	if (rc == -EIO)
		return gpunvme_set_error(rc, "namespace %u: read of LBA %llu+%u failed: %s", s->nsid,
					 (unsigned long long)slba, nlb, gpunvme_status_str(status));
	return rc; /* 0, or the library set the message */
}

/* the bytes of window-aligned offset `woff` in the cache, reading them on a miss */
static int ns_window(struct ns_src *s, uint64_t woff, const uint8_t **data, uint32_t *len)
{
	unsigned victim = 0;
	for (unsigned i = 0; i < NS_WINDOWS; i++) {
		if (s->win[i].len && s->win[i].off == woff) {
			s->win[i].used = ++s->clock;
			*data = s->bounce + (size_t)i * NS_WINDOW;
			*len = s->win[i].len;
			return 0;
		}
		if (s->win[i].used < s->win[victim].used)
			victim = i;
	}
	uint64_t size = s->nsze << s->lba_shift;
	uint64_t n = size - woff < NS_WINDOW ? size - woff : NS_WINDOW;
	uint8_t *dst = s->bounce + (size_t)victim * NS_WINDOW;
	s->win[victim].len = 0;
	int rc = ns_cmd(s, dst, woff >> s->lba_shift, (uint32_t)(n >> s->lba_shift));
	if (rc)
		return rc;
	s->win[victim].off = woff;
	s->win[victim].len = (uint32_t)n;
	s->win[victim].used = ++s->clock;
	*data = dst;
	*len = (uint32_t)n;
	return 0;
}

static int ns_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct ns_src *s = ctx;
	uint64_t size = s->nsze << s->lba_shift;
	if (off > size || len > size - off)
		return gpunvme_set_error(-EIO, "namespace %u: read of %zu bytes at %llu is past the end (%llu bytes)",
					 s->nsid, len, (unsigned long long)off, (unsigned long long)size);
	uint8_t *p = buf;
	if (len <= NS_WINDOW) {
		/* at most two windows */
		while (len) {
			uint64_t woff = off & ~(uint64_t)(NS_WINDOW - 1);
			const uint8_t *d;
			uint32_t wl;
			int rc = ns_window(s, woff, &d, &wl);
			if (rc)
				return rc;
			size_t skip = (size_t)(off - woff), k = wl - skip;
			if (k > len)
				k = len;
			memcpy(p, d + skip, k);
			p += k;
			off += k;
			len -= k;
		}
		return 0;
	}
	/* large: whole LBAs through the whole buffer, cache dropped */
	for (unsigned i = 0; i < NS_WINDOWS; i++)
		s->win[i].len = 0;
	while (len) {
		uint64_t slba = off >> s->lba_shift;
		size_t skip = (size_t)(off & (s->lba_size - 1));
		/* whole LBAs covering [off, off + len), at most a bounce buffer */
		uint64_t want = ((uint64_t)skip + len + s->lba_size - 1) >> s->lba_shift;
		uint32_t nlb = want < s->bounce_lbas ? (uint32_t)want : s->bounce_lbas;
		int rc = ns_cmd(s, s->bounce, slba, nlb);
		if (rc)
			return rc;
		size_t k = ((size_t)nlb << s->lba_shift) - skip;
		if (k > len)
			k = len;
		memcpy(p, s->bounce + skip, k);
		p += k;
		off += k;
		len -= k;
	}
	return 0;
}

static void ns_close(void *ctx)
{
	struct ns_src *s = ctx;
	gpunvme_qpair_destroy(s->qp);
	gpunvme_dma_free(s->c, s->bounce);
	free(s);
}

int gpunvme_blkdev_open_ns(struct gpunvme_ctrl *c, uint32_t nsid, struct gpunvme_blkdev *out)
{
	if (!c || !out)
		return gpunvme_set_error(-EINVAL, "blkdev_open_ns: bad arguments");
	struct gpunvme_ns_info ni;
	int rc = gpunvme_ns_info(c, nsid, &ni);
	if (rc)
		return rc;
	if (ni.lba_size < 512 || ni.lba_size > NS_BOUNCE || (ni.lba_size & (ni.lba_size - 1)))
		return gpunvme_set_error(-EINVAL, "namespace %u: LBA size %u is not supported", nsid, ni.lba_size);
	if (ni.nsze == 0 || ni.nsze > (UINT64_MAX >> ni.lba_shift))
		return gpunvme_set_error(-EINVAL, "namespace %u: size of %llu blocks is not usable", nsid,
					 (unsigned long long)ni.nsze);
	struct ns_src *s = calloc(1, sizeof(*s));
	if (!s)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	s->c = c;
	s->nsid = nsid;
	s->lba_size = ni.lba_size;
	s->lba_shift = ni.lba_shift;
	s->nsze = ni.nsze;
	s->bounce_lbas = NS_BOUNCE >> ni.lba_shift;
	if ((rc = ns_queue(s))) {
		free(s);
		return rc;
	}
	s->bounce = gpunvme_dma_alloc(c, NS_BOUNCE);
	if (!s->bounce) {
		gpunvme_qpair_destroy(s->qp);
		free(s);
		return gpunvme_set_error(-ENOMEM, "namespace %u: no DMA memory for a %u KiB bounce buffer", nsid,
					 NS_BOUNCE >> 10);
	}
	*out = (struct gpunvme_blkdev){ ns_read, ns_close, s, ni.nsze << ni.lba_shift, ni.lba_size, ns_release };
	return 0;
}

void gpunvme_blkdev_release(struct gpunvme_blkdev *b)
{
	if (b && b->release)
		b->release(b->ctx);
}

void gpunvme_blkdev_close(struct gpunvme_blkdev *b)
{
	if (!b || !b->close)
		return;
	b->close(b->ctx);
	b->close = NULL;
	b->ctx = NULL;
}
