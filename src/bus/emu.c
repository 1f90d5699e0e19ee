/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator bus: the controller is the in-process emulator. DMA memory is
 * ordinary locked-free anonymous memory registered in the emulator's
 * address table at IOVAs this bus hands out, so address translation is
 * exercised exactly as behind an IOMMU.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bus/bus.h"
#include "gpunvme/emu.h"

/* A GPU range mapped page by page (gpu_pages=1): the bus address of each
 * 4 KiB page, with an unmapped page between any two. */
/* One map_device: its engine and GPU range (the engine's unmap hook needs
 * them) and, with gpu_pages=1, its page table (n pages; otherwise n = 0
 * and the range is contiguous from iova). */
struct emu_devmap {
	struct emu_devmap *next;
	uint64_t iova;
	void *engine;
	uint64_t addr;
	int engine_mapped; /* the engine's unmap hook is owed */
	size_t n;
	uint64_t table[];
};

struct emu_bus {
	struct gpunvme_emu *emu;
	uint64_t next_iova;
	int gpu_pages;
	pthread_mutex_t lock;       /* devmaps */
	struct emu_devmap *devmaps;
};

struct emu_dma {
	uint64_t iova;
	size_t len;
};

/* IOVAs unrelated to virtual addresses, so a driver that hands the
 * controller a virtual address gets a Data Transfer Error, not luck. */
#define EMU_IOVA_BASE 0x100000000000ull

static int emu_open(struct gpunvme_bus *b, const char *addr, const struct gpunvme_opts *opts)
{
	(void)opts;
	struct gpunvme_emu_config cfg;
	const char *err = NULL;
	int rc = gpunvme_emu_config_parse(&cfg, addr, &err);
	if (rc)
		return gpunvme_set_error(rc, "emu:%s: %s", addr, err ? err : "bad device string");
	struct emu_bus *eb = calloc(1, sizeof(*eb));
	if (!eb)
		return gpunvme_set_error(-ENOMEM, "emu:%s: out of memory", addr);
	rc = gpunvme_emu_create(&cfg, &eb->emu);
	if (rc) {
		free(eb);
		/* name the image that failed: any namespace may be one */
		for (uint32_t i = 0; i < cfg.nr_ns; i++) {
			const struct gpunvme_emu_ns_config *ns = &cfg.ns[i];
			struct stat st;
			if (ns->backing != GPUNVME_EMU_BACK_FILE)
				continue;
			if (stat(ns->path, &st) != 0)
				return gpunvme_set_error(rc, "emu:%s: namespace %u: cannot open the image '%s': %s (give "
							     "ram:SIZE, null:SIZE or an image file; create one with: truncate -s 1G %s)",
							 addr, i + 1, ns->path, strerror(errno), ns->path);
			if (!S_ISREG(st.st_mode))
				return gpunvme_set_error(rc, "emu:%s: namespace %u: '%s' is not a regular file (an image "
							     "file is needed; block devices go through vfio:/uio:)",
							 addr, i + 1, ns->path);
			uint64_t bs = 1ull << ns->lba_shift;
			if (st.st_size == 0 || (uint64_t)st.st_size % bs)
				return gpunvme_set_error(rc, "emu:%s: namespace %u: image '%s' holds %lld bytes, not a "
							     "non-empty whole number of %llu-byte blocks (truncate -s SIZE %s)",
							 addr, i + 1, ns->path, (long long)st.st_size,
							 (unsigned long long)bs, ns->path);
		}
		/* an image that is only not writable is served read-only
		 * (emu_ns.c): what is left here is one that cannot be read, or
		 * a size that would grow a read-only image */
		if (cfg.ns[0].backing == GPUNVME_EMU_BACK_FILE && rc == -EROFS)
			return gpunvme_set_error(rc, "emu:%s: cannot open the image: it is read-only and the size asked for "
						     "would grow it (leave out the size, or make it writable)", addr);
		if (cfg.ns[0].backing == GPUNVME_EMU_BACK_FILE && (rc == -EACCES || rc == -EPERM))
			return gpunvme_set_error(rc, "emu:%s: cannot open the image: %s (it is not readable by this user: "
						     "check its mode and owner)", addr, strerror(-rc));
		if (cfg.ns[0].backing == GPUNVME_EMU_BACK_FILE && rc != -EINVAL)
			return gpunvme_set_error(rc, "emu:%s: cannot open the image: %s", addr, strerror(-rc));
		if (rc == -EINVAL)
			return gpunvme_set_error(rc, "emu:%s: invalid configuration (sizes must be whole blocks; an image "
						     "must be a non-empty multiple of the block size: truncate -s SIZE PATH)", addr);
		if (rc == -ENOMEM) {
			uint64_t total = 0;
			for (uint32_t i = 0; i < cfg.nr_ns; i++)
				if (cfg.ns[i].backing == GPUNVME_EMU_BACK_RAM)
					total += cfg.ns[i].size;
			return gpunvme_set_error(rc, "emu:%s: cannot reserve %llu MiB of RAM for the namespaces "
						     "(use null:SIZE to model a large device without data)",
						 addr, (unsigned long long)(total >> 20));
		}
		return gpunvme_set_error(rc, "emu:%s: cannot create the emulator: %s", addr, strerror(-rc));
	}
	eb->next_iova = EMU_IOVA_BASE;
	eb->gpu_pages = cfg.gpu_pages;
	pthread_mutex_init(&eb->lock, NULL);
	b->priv = eb;
	b->bar0 = (volatile uint8_t *)gpunvme_emu_bar0(eb->emu);
	b->bar0_len = gpunvme_emu_bar0_size(eb->emu);
	return 0;
}

static void emu_close(struct gpunvme_bus *b)
{
	struct emu_bus *eb = b->priv;
	if (!eb)
		return;
	gpunvme_emu_destroy(eb->emu);
	while (eb->devmaps) {
		struct emu_devmap *d = eb->devmaps;
		eb->devmaps = d->next;
		free(d);
	}
	pthread_mutex_destroy(&eb->lock);
	free(eb);
	b->priv = NULL;
}

static int emu_dma_alloc(struct gpunvme_bus *b, size_t len, void **va, void **handle)
{
	struct emu_bus *eb = b->priv;
	struct emu_dma *d = malloc(sizeof(*d));
	if (!d)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		free(d);
		return gpunvme_set_error(-ENOMEM, "cannot allocate %zu bytes of DMA memory", len);
	}
	/* a guard page's worth of IOVA space between allocations: a transfer
	 * that overruns its buffer faults instead of reaching the next one */
	d->iova = __atomic_fetch_add(&eb->next_iova, len + 4096, __ATOMIC_RELAXED);
	d->len = len;
	int rc = gpunvme_emu_dma_map(eb->emu, d->iova, p, len);
	if (rc) {
		munmap(p, len);
		free(d);
		return gpunvme_set_error(rc, "emulator DMA map failed: %s", strerror(-rc));
	}
	*va = p;
	*handle = d;
	return 0;
}

static void emu_dma_free(struct gpunvme_bus *b, void *va, size_t len, void *handle)
{
	struct emu_bus *eb = b->priv;
	struct emu_dma *d = handle;
	gpunvme_emu_dma_unmap(eb->emu, d->iova);
	munmap(va, len);
	free(d);
}

static uint64_t emu_iova_of(struct gpunvme_bus *b, void *handle, size_t off)
{
	(void)b;
	return ((struct emu_dma *)handle)->iova + off;
}

static size_t emu_contig(struct gpunvme_bus *b, void *handle)
{
	(void)b;
	return ((struct emu_dma *)handle)->len;
}

/*
 * The emulator's device-memory DMA engine: the GPU's copy engine, one
 * stream per emulator lane (src/emu_cuda/copy_engine.cu). Its handle, in
 * struct gpunvme_devmem's engine, is a struct gpunvme_emu_gpu_ops. Weak:
 * only programs that link the GPU data path (gpunvme_cuda, which links
 * gpunvme_emu_cuda) have it; elsewhere (no CUDA, the static guest programs)
 * it is NULL and the bus has no engine.
 */
extern const struct gpunvme_devmem_engine_ops gpunvme_emu_cuda_engine __attribute__((weak));

static const struct gpunvme_emu_gpu_ops *devmem_copy(const struct gpunvme_devmem *m)
{
	return (const struct gpunvme_emu_gpu_ops *)m->engine;
}

static void devmap_add(struct emu_bus *eb, struct emu_devmap *d, const struct gpunvme_devmem *m)
{
	d->engine = m->engine;
	d->addr = m->addr;
	d->engine_mapped = 0;
	if (&gpunvme_emu_cuda_engine && gpunvme_emu_cuda_engine.map && m->engine)
		d->engine_mapped = gpunvme_emu_cuda_engine.map(m->engine, m->addr, m->len);
	pthread_mutex_lock(&eb->lock);
	d->next = eb->devmaps;
	eb->devmaps = d;
	pthread_mutex_unlock(&eb->lock);
}

/* GPU memory in the emulator's address table: data moves with the copy
 * engine through m->engine. */
static int emu_map_pages(struct emu_bus *eb, const struct gpunvme_devmem *m, uint64_t *iova)
{
	if (m->addr & 4095)
		return gpunvme_set_error(-EINVAL, "emulator (gpu_pages=1): GPU memory at 0x%llx is not 4 KiB aligned",
					 (unsigned long long)m->addr);
	size_t n = (m->len + 4095) / 4096;
	struct emu_devmap *d = malloc(sizeof(*d) + n * sizeof(uint64_t));
	if (!d)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	d->n = n;
	/* ascending, with a hole after every page: nothing may treat the
	 * range as contiguous */
	uint64_t base = __atomic_fetch_add(&eb->next_iova, 2 * 4096 * (uint64_t)n + 4096, __ATOMIC_RELAXED);
	for (size_t k = 0; k < n; k++) {
		d->table[k] = base + 2 * 4096 * (uint64_t)k;
		int rc = gpunvme_emu_dma_map_gpu(eb->emu, d->table[k], m->addr + 4096 * (uint64_t)k, 4096,
						 devmem_copy(m));
		if (rc) {
			while (k--)
				gpunvme_emu_dma_unmap(eb->emu, d->table[k]);
			free(d);
			return gpunvme_set_error(rc, "emulator: cannot map GPU memory: %s", strerror(-rc));
		}
	}
	d->iova = d->table[0];
	devmap_add(eb, d, m);
	*iova = d->iova;
	return 0;
}

static struct emu_devmap *devmap_find(struct emu_bus *eb, uint64_t iova, int unlink)
{
	struct emu_devmap **pp, *d = NULL;
	pthread_mutex_lock(&eb->lock);
	for (pp = &eb->devmaps; *pp; pp = &(*pp)->next)
		if ((*pp)->iova == iova) {
			d = *pp;
			if (unlink)
				*pp = d->next;
			break;
		}
	pthread_mutex_unlock(&eb->lock);
	return d;
}

static int emu_device_table(struct gpunvme_bus *b, uint64_t iova, const uint64_t **table, size_t *n)
{
	struct emu_devmap *d = devmap_find(b->priv, iova, 0);
	if (!d || !d->n)
		return -EOPNOTSUPP; /* a contiguous mapping */
	*table = d->table;
	*n = d->n;
	return 0;
}

static int emu_map_device(struct gpunvme_bus *b, const struct gpunvme_devmem *m, uint64_t *iova)
{
	struct emu_bus *eb = b->priv;
	if (eb->gpu_pages)
		return emu_map_pages(eb, m, iova);
	/* the bus address keeps the memory's offset in its page, as an IOMMU
	 * mapping does: the dword alignment a caller checks on its pointer
	 * (§4.3, PRP entries) is then the alignment the controller sees */
	uint64_t lo = m->addr & 4095;
	uint64_t span = ((lo + m->len + 4095) & ~(uint64_t)4095) + 4096; /* + a guard page */
	uint64_t a = __atomic_fetch_add(&eb->next_iova, span, __ATOMIC_RELAXED) + lo;
	struct emu_devmap *d = calloc(1, sizeof(*d));
	if (!d)
		return gpunvme_set_error(-ENOMEM, "out of memory");
	int rc = gpunvme_emu_dma_map_gpu(eb->emu, a, m->addr, m->len, devmem_copy(m));
	if (rc) {
		free(d);
		return gpunvme_set_error(rc, "emulator: cannot map GPU memory: %s", strerror(-rc));
	}
	d->iova = a;
	devmap_add(eb, d, m);
	*iova = a;
	return 0;
}

static int emu_unmap_device(struct gpunvme_bus *b, uint64_t iova)
{
	struct emu_bus *eb = b->priv;
	struct emu_devmap *d = devmap_find(eb, iova, 1);
	if (!d)
		return gpunvme_emu_dma_unmap(eb->emu, iova);
	/* the emulator's unmap waits for the commands using the range, so
	 * the engine's unmap hook comes after it */
	int rc = d->n ? 0 : gpunvme_emu_dma_unmap(eb->emu, iova);
	for (size_t k = 0; k < d->n; k++) {
		int r = gpunvme_emu_dma_unmap(eb->emu, d->table[k]);
		if (r && !rc)
			rc = r;
	}
	if (d->engine_mapped)
		gpunvme_emu_cuda_engine.unmap(d->engine, d->addr);
	free(d);
	return rc;
}

/* The emulator serves I/O queue qid on worker qid % workers (emu_admin.c):
 * that many queues are served at once. Threadless (workers=0): the caller's
 * polls serve every queue, one at a time. */
static uint32_t emu_io_parallel(struct gpunvme_bus *b)
{
	struct emu_bus *eb = b->priv;
	unsigned lanes = gpunvme_emu_lanes(eb->emu); /* workers + the admin lane */
	return lanes > 1 ? lanes - 1 : 1;
}

const struct gpunvme_bus_ops gpunvme_bus_emu = {
	.name = "emu",
	/* registers are host memory, GPU memory is reached by the copy engine */
	.caps = GPUNVME_CAP_DEVMEM_DMA | GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_CSTS_GPU | GPUNVME_CAP_DEEP_QUEUES,
	.open = emu_open,
	.close = emu_close,
	.dma_alloc = emu_dma_alloc,
	.dma_free = emu_dma_free,
	.iova_of = emu_iova_of,
	.contig = emu_contig,
	.map_device = emu_map_device,
	.unmap_device = emu_unmap_device,
	.device_table = emu_device_table,
	.devmem_engine = &gpunvme_emu_cuda_engine,
	.io_parallel = emu_io_parallel,
};

struct gpunvme_emu *gpunvme_bus_emu_get(struct gpunvme_bus *b)
{
	return b->ops == &gpunvme_bus_emu ? ((struct emu_bus *)b->priv)->emu : NULL;
}
