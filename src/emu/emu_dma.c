/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator's DMA engine: an address table (IOVA -> host or GPU memory),
 * PRP walking (NVMe 1.4 §4.3) and data movement. Every controller access to
 * host memory goes through here, so an address outside the table is a Data
 * Transfer Error and never a wild access.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/uio.h>

#include "emu/emu_internal.h"

int emu_dma_init(struct emu_dma *d)
{
	memset(d, 0, sizeof(*d));
	return -pthread_rwlock_init(&d->lock, NULL);
}

void emu_dma_fini(struct emu_dma *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->r[i]);
	free(d->r);
	pthread_rwlock_destroy(&d->lock);
}

/* Index of the first region with iova > x (binary search). */
static size_t dma_upper(const struct emu_dma *d, uint64_t x)
{
	size_t lo = 0, hi = d->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (d->r[mid]->iova <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The region holding all of [iova, iova + len), or NULL. Caller holds the
 * table lock (read or write). */
struct emu_region *emu_dma_find(struct emu_dma *d, uint64_t iova, uint64_t len)
{
	size_t i = dma_upper(d, iova);
	if (i == 0)
		return NULL;
	struct emu_region *r = d->r[i - 1];
	uint64_t off = iova - r->iova;
	if (off >= r->len || len > r->len - off)
		return NULL;
	return r;
}

static int dma_insert(struct gpunvme_emu *emu, struct emu_region *nr)
{
	struct emu_dma *d = &emu->dma;
	if (nr->len == 0 || nr->iova + nr->len < nr->iova)
		return -EINVAL;
	pthread_rwlock_wrlock(&d->lock);
	size_t i = dma_upper(d, nr->iova);
	/* no overlap with the region before or after */
	if ((i > 0 && d->r[i - 1]->iova + d->r[i - 1]->len > nr->iova) ||
	    (i < d->n && nr->iova + nr->len > d->r[i]->iova)) {
		pthread_rwlock_unlock(&d->lock);
		return -EEXIST;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 16;
		struct emu_region **r = realloc(d->r, cap * sizeof(*r));
		if (!r) {
			pthread_rwlock_unlock(&d->lock);
			return -ENOMEM;
		}
		d->r = r;
		d->cap = cap;
	}
	memmove(&d->r[i + 1], &d->r[i], (d->n - i) * sizeof(*d->r));
	d->r[i] = nr;
	d->n++;
	pthread_rwlock_unlock(&d->lock);
	return 0;
}

/* A copy of *tmpl into the address table (-EEXIST on overlap). */
static int region_add(struct gpunvme_emu *emu, const struct emu_region *tmpl)
{
	struct emu_region *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = *tmpl;
	int rc = dma_insert(emu, r);
	if (rc)
		free(r);
	return rc;
}

int gpunvme_emu_dma_map(struct gpunvme_emu *emu, uint64_t iova, void *vaddr, size_t len)
{
	if (!emu || !vaddr)
		return -EINVAL;
	struct emu_region r = { .iova = iova, .len = len, .va = vaddr };
	return region_add(emu, &r);
}

int gpunvme_emu_dma_map_gpu(struct gpunvme_emu *emu, uint64_t iova, uint64_t dev_addr, size_t len,
			    const struct gpunvme_emu_gpu_ops *ops)
{
	if (!emu || !ops || !ops->copy || !ops->sync)
		return -EINVAL;
	struct emu_region r = { .iova = iova, .len = len, .dev = dev_addr, .gpu = *ops };
	return region_add(emu, &r);
}

int gpunvme_emu_dma_unmap(struct gpunvme_emu *emu, uint64_t iova)
{
	struct emu_dma *d = &emu->dma;
	/* The write lock waits for every worker pass (they hold the read lock
	 * while they move data), so no DMA into the region runs afterwards. */
	pthread_rwlock_wrlock(&d->lock);
	size_t i = dma_upper(d, iova);
	if (i == 0 || d->r[i - 1]->iova != iova) {
		pthread_rwlock_unlock(&d->lock);
		return -ENOENT;
	}
	struct emu_region *r = d->r[i - 1];
	if (__atomic_load_n(&r->users, __ATOMIC_RELAXED)) {
		/* an I/O or admin queue still lives there */
		pthread_rwlock_unlock(&d->lock);
		return -EBUSY;
	}
	memmove(&d->r[i - 1], &d->r[i], (d->n - i) * sizeof(*d->r));
	d->n--;
	pthread_rwlock_unlock(&d->lock);
	free(r);
	return 0;
}

int emu_thread_init(struct emu_thread *t, struct gpunvme_emu *emu, unsigned lane)
{
	memset(t, 0, sizeof(*t));
	t->emu = emu;
	t->lane = lane;
	/* Worst case: every 4 KiB page of the largest transfer is its own
	 * segment, plus the partial first and last pages. */
	uint64_t cap = emu->max_xfer / 4096 + 2;
	t->segs = calloc(cap, sizeof(*t->segs));
	if (!t->segs)
		return -ENOMEM;
	t->segs_cap = (uint32_t)cap;
	t->batch = calloc(EMU_BATCH_MAX, sizeof(*t->batch));
	if (!t->batch) {
		free(t->segs);
		t->segs = NULL;
		return -ENOMEM;
	}
	return 0;
}

void emu_thread_fini(struct emu_thread *t)
{
	free(t->segs);
	t->segs = NULL;
	free(t->batch);
	t->batch = NULL;
}

/* A Data Transfer Error (NVMe 1.4 Figure 126, SC 04h) tells the host only
 * that the controller could not move the data; GPUNVME_EMU_ERRORS=1 says
 * here which step failed, for the address and the copy's return code (a
 * host bug: an address in no registered region; a copy engine's failure:
 * -EIO, -ETIMEDOUT, or the DMA process's -EFAULT for memory it never
 * mapped). Off unless asked: the fault tests cause these on purpose. */
static uint16_t xfer_err(struct emu_thread *t, const char *step, uint64_t addr, uint64_t len, int rc)
{
	if (t->emu->say_xfer)
		fprintf(stderr, "gpunvme-emu: data transfer error (lane %u): %s, address 0x%llx, %llu bytes, rc %d\n",
			t->lane, step, (unsigned long long)addr, (unsigned long long)len, rc);
	return GPUNVME_SC_DATA_XFER_ERROR | GPUNVME_STATUS_DNR;
}

/* Resolve [addr, addr + len), which must sit inside one region. Caller
 * holds the table lock. */
static uint16_t seg_resolve(struct emu_thread *t, uint64_t addr, uint64_t len, struct emu_seg *s)
{
	struct emu_region *r = emu_dma_find(&t->emu->dma, addr, len);
	if (!r)
		return xfer_err(t, "in no registered region", addr, len, 0);
	uint64_t off = addr - r->iova;
	s->host = r->va ? r->va + off : NULL;
	s->dev = r->va ? 0 : r->dev + off;
	s->dev_end = r->va ? 0 : r->dev + r->len;
	s->gpu = r->va ? NULL : &r->gpu;
	s->len = len;
	return 0;
}

/* Append a translated piece to t->segs, merging it with the previous
 * segment when the two are contiguous. */
static uint16_t seg_add(struct emu_thread *t, uint32_t *n, uint64_t addr, uint64_t len)
{
	struct emu_seg s;
	uint16_t st = seg_resolve(t, addr, len, &s);
	if (st)
		return st;
	if (*n > 0) {
		struct emu_seg *p = &t->segs[*n - 1];
		if (s.host && p->host && p->host + p->len == s.host) {
			p->len += len;
			return 0;
		}
		if (!s.host && !p->host && p->gpu == s.gpu && p->dev + p->len == s.dev) {
			p->len += len;
			return 0;
		}
	}
	if (*n >= t->segs_cap) /* cannot happen: transfers are bounded by max_xfer */
		return GPUNVME_SC_INTERNAL;
	t->segs[(*n)++] = s;
	return 0;
}

/* Read PRP list entries (the controller reads host memory). */
static uint16_t read_list(struct emu_thread *t, uint64_t addr, uint64_t *ents, uint32_t n)
{
	struct emu_seg s;
	uint16_t st = seg_resolve(t, addr, (uint64_t)n * 8, &s);
	if (st)
		return st;
	if (s.host) {
		memcpy(ents, s.host, (size_t)n * 8);
		return 0;
	}
	/* a PRP list in GPU memory: copy it out and wait for it */
	int rc = s.gpu->copy(s.gpu->ctx, t->lane, s.dev, ents, (size_t)n * 8, 0);
	if (!rc)
		rc = s.gpu->sync(s.gpu->ctx, t->lane);
	if (rc)
		return xfer_err(t, "a PRP list in GPU memory", addr, (uint64_t)n * 8, rc);
	return 0;
}

/*
 * Walk the PRPs of a transfer of `len` bytes into t->segs (NVMe 1.4 §4.3,
 * with the checks QEMU's nvme_map_prp makes). Returns 0 or a status value.
 *  - PRP1 may carry an offset; it covers up to the end of its page.
 *  - If the rest fits in one page, PRP2 is a data pointer: page-aligned.
 *  - Otherwise PRP2 points to a PRP list (offset allowed, qword-aligned).
 *    Entries are page-aligned; when a list page is full and more than one
 *    page of data remains, its last entry points to the next list page,
 *    which must be page-aligned too.
 * Caller holds the table lock.
 */
uint16_t emu_prp_map(struct emu_thread *t, uint64_t prp1, uint64_t prp2, uint64_t len, uint32_t *nsegs)
{
	const uint64_t ps = 1ull << t->emu->page_shift;
	const uint64_t mask = ps - 1;
	const uint16_t bad_off = GPUNVME_SC_INVALID_PRP_OFFSET | GPUNVME_STATUS_DNR;
	uint32_t n = 0;
	uint16_t st;

	*nsegs = 0;
	if (len == 0)
		return 0;
	uint64_t first = ps - (prp1 & mask);
	if (first > len)
		first = len;
	if ((st = seg_add(t, &n, prp1, first)))
		return st;
	len -= first;
	if (len > 0 && len <= ps) {
		if (prp2 & mask)
			return bad_off;
		if ((st = seg_add(t, &n, prp2, len)))
			return st;
		len = 0;
	}
	if (len > 0 && (prp2 & 7))
		return bad_off;

	uint64_t list = prp2;
	uint64_t nents = (ps - (list & mask)) / 8; /* slots in this list page */
	uint64_t idx = 0;                          /* next slot to read */
	uint64_t ents[512];
	while (len > 0) {
		uint64_t avail = nents - idx;
		uint64_t need = (len + ps - 1) / ps;
		uint64_t take = need < avail ? need : avail;
		if (take > 512)
			take = 512;
		if ((st = read_list(t, list + idx * 8, ents, (uint32_t)take)))
			return st;
		for (uint64_t i = 0; i < take; i++, idx++) {
			uint64_t ent = ents[i];
			if (ent & mask)
				return bad_off;
			if (idx == nents - 1 && len > ps) {
				/* last slot of a full page: chain to the next list */
				list = ent;
				nents = ps / 8;
				idx = 0;
				break;
			}
			uint64_t chunk = len < ps ? len : ps;
			if ((st = seg_add(t, &n, ent, chunk)))
				return st;
			len -= chunk;
		}
	}
	*nsegs = n;
	return 0;
}

/* Issue the queued GPU copies (one copy_batch call). A refusal fails every
 * command whose pieces were in it: the flag makes the next emu_gpu_sync
 * report it for all completions still waiting on this lane's copies. */
static int batch_flush(struct emu_thread *t)
{
	if (!t->nbatch)
		return 0;
	const struct gpunvme_emu_gpu_ops *o = &t->batch_ops;
	int rc = o->copy_batch(o->ctx, t->lane, t->batch, t->nbatch);
	t->nbatch = 0;
	if (rc)
		t->batch_failed = true;
	return rc;
}

/* One GPU piece: queued for a batch when the region's ops take batches
 * (flushing first when the batch is full or belongs to other ops), else
 * copied at once. */
static int gpu_piece(struct emu_thread *t, const struct emu_seg *s, uint8_t *buf, int to_host)
{
	const struct gpunvme_emu_gpu_ops *o = s->gpu;
	t->gpu_pending = true;
	if (!o->copy_batch)
		return o->copy(o->ctx, t->lane, s->dev, buf, s->len, to_host);
	if (t->nbatch && (t->nbatch == EMU_BATCH_MAX || t->batch_ops.copy_batch != o->copy_batch ||
			  t->batch_ops.ctx != o->ctx)) {
		int rc = batch_flush(t);
		if (rc)
			return rc;
	}
	t->batch_ops = *o;
	t->batch[t->nbatch++] = (struct gpunvme_emu_copy){ s->dev, buf, s->len, to_host, s->dev_end };
	return 0;
}

uint16_t emu_segs_copy(struct emu_thread *t, uint32_t nsegs, uint8_t *buf, int to_host)
{
	for (uint32_t i = 0; i < nsegs; i++) {
		struct emu_seg *s = &t->segs[i];
		if (s->host) {
			if (to_host)
				memcpy(s->host, buf, s->len);
			else
				memcpy(buf, s->host, s->len);
		} else {
			int rc = gpu_piece(t, s, buf, to_host);
			if (rc)
				return xfer_err(t, "a GPU copy", s->dev, s->len, rc);
		}
		buf += s->len;
	}
	return 0;
}

/* The whole of iov[0..n) written to (write) or read from fd at off, through
 * short transfers and EINTR (it consumes iov). 0, -errno, or -EIO where a
 * read meets the end of the file (or a write moves nothing). */
static int iov_all(int fd, struct iovec *v, int n, uint64_t off, bool write)
{
	while (n) {
		ssize_t r = write ? pwritev(fd, v, n, (off_t)off) : preadv(fd, v, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		size_t left = (size_t)r;
		while (n && left >= v->iov_len) {
			left -= v->iov_len;
			v++;
			n--;
		}
		if (n) {
			v->iov_base = (uint8_t *)v->iov_base + left;
			v->iov_len -= left;
		}
	}
	return 0;
}

/* Host segments into a file at off with one pwritev per IOV_MAX segments.
 * The kernel copies a page of the file at a time and a dying process stops
 * only between pages, so a crash of the process hosting the emulator (a
 * SIGKILL in the middle of a write) leaves every block of 512 B or 4 KiB
 * either old or new: a memcpy into the shared mapping could stop in the
 * middle of a block and tear it. One call covers transfers of up to 1024
 * segments (4 MiB of pages). Returns 0 or -errno. */
int emu_segs_to_file(struct emu_thread *t, uint32_t nsegs, int fd, uint64_t off)
{
	struct iovec iov[1024];
	uint32_t i = 0;
	while (i < nsegs) {
		int n = 0;
		uint64_t len = 0;
		for (; i < nsegs && n < (int)(sizeof(iov) / sizeof(iov[0])); i++, n++) {
			if (!t->segs[i].host)
				return -EFAULT;
			iov[n].iov_base = t->segs[i].host;
			iov[n].iov_len = t->segs[i].len;
			len += t->segs[i].len;
		}
		int rc = iov_all(fd, iov, n, off, true);
		if (rc)
			return rc;
		off += len;
	}
	return 0;
}

/*
 * A Read from an image file's namespace: its bytes are the file's from off
 * (fd), also mapped at map. Host segments are filled with preadv; GPU
 * segments go to the ops' copy_from_file where there is one (the copy
 * engine reads the file into its own pinned staging), else to copy() from
 * the mapping.
 *
 * Why not memcpy from the mapping, as RAM namespaces do: a load reads each
 * byte once, so every 4 KiB page of the mapping is touched for the first
 * time and faults, while pread copies from the page cache without mapping
 * anything (bench/EMU_NOTES.md 2026-11-28, bench/pread_vs_mmap.c: 13.2-14.3
 * GB/s against 6.1-12.3). The mapping and pread see the same page cache
 * (MAP_SHARED), so writes through either are seen by both.
 */
uint16_t emu_segs_from_file(struct emu_thread *t, uint32_t nsegs, const uint8_t *map, int fd, uint64_t off)
{
	struct iovec iov[16]; /* host runs of one preadv; more: another call (a
			       * buffer of scattered 4 KiB pages: one run each) */
	int n = 0;
	uint64_t at = 0, iov_at = 0; /* bytes of the transfer before segment i; before iov[0] */
	for (uint32_t i = 0; i < nsegs; at += t->segs[i++].len) {
		const struct emu_seg *s = &t->segs[i];
		if (n && (!s->host || n == (int)(sizeof(iov) / sizeof(iov[0])))) {
			if (iov_all(fd, iov, n, off + iov_at, false))
				return GPUNVME_SC_UNRECOVERED_READ;
			n = 0;
		}
		if (s->host) {
			if (!n)
				iov_at = at;
			iov[n].iov_base = s->host;
			iov[n++].iov_len = s->len;
			continue;
		}
		const struct gpunvme_emu_gpu_ops *o = s->gpu;
		int rc;
		if (o->copy_from_file) {
			t->gpu_pending = true;
			const uint64_t p0 = t->emu->prof ? emu_now_ns() : 0;
			rc = o->copy_from_file(o->ctx, t->lane, s->dev, s->dev_end, map + at, fd, off + at, s->len);
			if (p0)
				t->prof.file_ns += emu_now_ns() - p0;
		} else {
			rc = gpu_piece(t, s, (uint8_t *)(uintptr_t)(map + at), 1);
		}
		if (rc)
			return xfer_err(t, "a GPU copy from the image file", s->dev, s->len, rc);
	}
	if (n && iov_all(fd, iov, n, off + iov_at, false))
		return GPUNVME_SC_UNRECOVERED_READ;
	return 0;
}

uint16_t emu_gpu_sync(struct emu_thread *t)
{
	/* One sync per distinct GPU region would be exact; every region of a
	 * process shares the lane's stream in practice, so sync through the
	 * ops of the regions in the table. */
	uint16_t st = 0;
	if (!t->gpu_pending)
		return 0;
	t->gpu_pending = false;
	/* the queued pieces first: a sync covers only copies already issued */
	batch_flush(t);
	if (t->batch_failed) {
		t->batch_failed = false;
		st = xfer_err(t, "a batch of GPU copies", 0, 0, -EIO);
	}
	struct emu_dma *d = &t->emu->dma;
	const struct gpunvme_emu_gpu_ops *last = NULL;
	for (size_t i = 0; i < d->n; i++) {
		struct emu_region *r = d->r[i];
		if (r->va)
			continue;
		if (last && last->sync == r->gpu.sync && last->ctx == r->gpu.ctx)
			continue;
		int rc = r->gpu.sync(r->gpu.ctx, t->lane);
		if (rc)
			st = xfer_err(t, "waiting for the GPU copies", r->iova, 0, rc);
		last = &r->gpu;
	}
	/* the held completions whose copies this sync covered fail with it */
	if (st && !t->gpu_err)
		t->gpu_err = st;
	return st;
}

/* Admin data transfers (admin thread, which holds no table lock otherwise):
 * small buffers moved at once, GPU copies synced. */
uint16_t emu_dma_to_host(struct emu_thread *t, const struct gpunvme_sqe *c, const void *src, uint64_t len)
{
	uint32_t n;
	pthread_rwlock_rdlock(&t->emu->dma.lock);
	uint16_t st = emu_prp_map(t, c->prp1, c->prp2, len, &n);
	if (!st)
		st = emu_segs_copy(t, n, (uint8_t *)(uintptr_t)src, 1);
	if (!st)
		st = emu_gpu_sync(t);
	pthread_rwlock_unlock(&t->emu->dma.lock);
	return st;
}

uint16_t emu_dma_from_host(struct emu_thread *t, const struct gpunvme_sqe *c, void *dst, uint64_t len)
{
	uint32_t n;
	pthread_rwlock_rdlock(&t->emu->dma.lock);
	uint16_t st = emu_prp_map(t, c->prp1, c->prp2, len, &n);
	if (!st)
		st = emu_segs_copy(t, n, dst, 0);
	if (!st)
		st = emu_gpu_sync(t);
	pthread_rwlock_unlock(&t->emu->dma.lock);
	return st;
}
