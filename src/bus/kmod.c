/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The kmod bus: a controller bound to this project's kernel module
 * (kmod/gpunvme.c, interface include/gpunvme/uapi/kmod.h). The module owns the
 * device like vfio-pci does, but maps memory through the kernel's DMA API:
 * the caller's pages (pinned), a dma-buf from any exporter (the NVIDIA open
 * driver's GPU memory, a DRM driver's buffer), another device's BAR. Every
 * mapping comes back as one bus address per 4 KiB page, so nothing here
 * assumes contiguity; with the IOMMU on, the kernel picks the IOVAs.
 *
 * Closing the device file is the safety net: the module disables the
 * controller (CC.EN=0, CSTS.RDY=0) before it unpins or unmaps anything,
 * also when this process dies.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bus/bus.h"
#include "bus/pci.h"
#include "gpunvme/uapi/kmod.h"

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define KPAGE GPUNVME_KMOD_PAGE
#define SZ_2M (2ull << 20)

struct kmod_dma;

struct kmod_priv {
	int fd;
	pthread_mutex_t lock;        /* devmaps */
	struct kmod_dma *devmaps;    /* map_device mappings, by first bus address */
	struct gpunvme_kmod_info info;
	char who[80]; /* "kmod:0000:01:00.0" */
	char dev[PATH_MAX];
};

struct kmod_dma {
	void *va;
	size_t len;
	int owned;          /* va was mmap()ed here (munmap on free) */
	uint32_t handle;    /* the module's mapping */
	size_t contig;      /* len when the bus addresses are one run, else 4 KiB */
	struct kmod_dma *next; /* in kmod_priv.devmaps */
	uint64_t table[];   /* bus address of each 4 KiB page */
};

static void kmod_close(struct gpunvme_bus *b);

static int kmod_open(struct gpunvme_bus *b, const char *addr, const struct gpunvme_opts *opts)
{
	char bdf[13], drv[64];
	struct kmod_priv *p;
	void *bar;
	int rc;

	(void)opts;
	if (gpunvme_pci_parse_bdf(addr, bdf))
		return gpunvme_set_error(-EINVAL,
					 "kmod:%s: not a PCI address: expected kmod:DDDD:BB:DD.F, e.g. kmod:0000:01:00.0 "
					 "(lspci -D -nn | grep -i nvme)",
					 addr);
	p = calloc(1, sizeof(*p));
	if (!p)
		return gpunvme_set_error(-ENOMEM, "kmod:%s: out of memory", bdf);
	p->fd = -1;
	pthread_mutex_init(&p->lock, NULL);
	snprintf(p->who, sizeof(p->who), "kmod:%s", bdf);
	b->priv = p;
	snprintf(b->addr, sizeof(b->addr), "%s", bdf);

	rc = gpunvme_pci_driver(bdf, drv, sizeof(drv));
	if (rc == -ENODEV) {
		gpunvme_set_error(rc, "%s: no such PCI device: find the address with lspci -D -nn | grep -i nvme",
				  p->who);
		goto fail;
	}
	if (rc) {
		gpunvme_set_error(rc, "%s: cannot read the bound driver: %s", p->who, strerror(-rc));
		goto fail;
	}
	if (strcmp(drv, "gpunvme") != 0) {
		char mod[PATH_MAX];

		snprintf(mod, sizeof(mod), "%s/module/gpunvme", gpunvme_pci_sysfs_root());
		if (access(mod, F_OK) != 0)
			rc = gpunvme_set_error(-ENODEV,
					       "%s: the gpunvme kernel module is not loaded: build it (make -C kmod) "
					       "and bind the controller: sudo scripts/kmod-bind.sh %s",
					       p->who, bdf);
		else
			rc = gpunvme_set_error(-EBUSY, "%s: bound to %s, not gpunvme: sudo scripts/kmod-bind.sh %s",
					       p->who, drv[0] ? drv : "no driver", bdf);
		goto fail;
	}
	snprintf(p->dev, sizeof(p->dev), "/dev/gpunvme/%s", bdf);
	p->fd = open(p->dev, O_RDWR | O_CLOEXEC);
	if (p->fd < 0) {
		rc = -errno;
		if (rc == -EBUSY)
			gpunvme_set_error(rc, "%s: %s is open in another process (one owner at a time)", p->who,
					  p->dev);
		else if (rc == -EACCES || rc == -EPERM)
			gpunvme_set_error(rc, "%s: cannot open %s: permission denied: run as root or "
					      "sudo chown $USER %s",
					  p->who, p->dev, p->dev);
		else
			gpunvme_set_error(rc, "%s: cannot open %s: %s", p->who, p->dev, strerror(-rc));
		goto fail;
	}
	if (ioctl(p->fd, GPUNVME_KMOD_INFO, &p->info)) {
		rc = gpunvme_set_error(-errno, "%s: GPUNVME_KMOD_INFO: %s", p->who, strerror(errno));
		goto fail;
	}
	if (p->info.version != GPUNVME_KMOD_VERSION) {
		rc = gpunvme_set_error(-EPROTO, "%s: kernel module interface version %u, this library speaks %u: "
						"rebuild and reload kmod/gpunvme.ko from this tree",
				       p->who, p->info.version, GPUNVME_KMOD_VERSION);
		goto fail;
	}
	if (p->info.bar0_len < 0x2000) {
		rc = gpunvme_set_error(-ENODEV, "%s: BAR0 is %llu bytes, too small for an NVMe controller", p->who,
				       (unsigned long long)p->info.bar0_len);
		goto fail;
	}
	bar = mmap(NULL, (size_t)p->info.bar0_len, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
	if (bar == MAP_FAILED) {
		rc = gpunvme_set_error(-errno, "%s: cannot mmap BAR0: %s", p->who, strerror(errno));
		goto fail;
	}
	/* The module maps BAR0's pages at the first access, all of them: a
	 * read of CAP now makes them present before anything registers the
	 * mapping with CUDA (NVIDIA's drivers read the PFNs from the page
	 * table). */
	(void)*(volatile uint32_t *)bar;
	b->bar0 = bar;
	b->bar0_len = (size_t)p->info.bar0_len;
	return 0;
fail:
	kmod_close(b);
	return rc;
}

static void kmod_close(struct gpunvme_bus *b)
{
	struct kmod_priv *p = b->priv;

	if (b->bar0)
		munmap((void *)b->bar0, b->bar0_len);
	b->bar0 = NULL;
	b->bar0_len = 0;
	if (!p)
		return;
	/* the module disables the controller, then drops every mapping */
	if (p->fd >= 0)
		close(p->fd);
	while (p->devmaps) {
		struct kmod_dma *d = p->devmaps;

		p->devmaps = d->next;
		free(d);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
	b->priv = NULL;
}

/* Ask the module to map; d->table receives the addresses. */
static int kmod_map(struct kmod_priv *p, struct kmod_dma *d, struct gpunvme_kmod_map *m, const char *what)
{
	int rc;

	m->len = d->len;
	m->table = (uint64_t)(uintptr_t)d->table;
	m->table_entries = d->len / KPAGE;
	if (ioctl(p->fd, GPUNVME_KMOD_MAP, m) == 0) {
		d->handle = m->handle;
		d->contig = d->len;
		for (size_t i = 1; i < d->len / KPAGE; i++)
			if (d->table[i] != d->table[0] + i * KPAGE) {
				d->contig = KPAGE;
				break;
			}
		return 0;
	}
	rc = -errno;
	switch (rc) {
	case -ENOMEM: {
		struct rlimit rl = {0};

		getrlimit(RLIMIT_MEMLOCK, &rl);
		ioctl(p->fd, GPUNVME_KMOD_INFO, &p->info); /* the pinned total now */
		return gpunvme_set_error(rc, "%s: cannot pin %zu KiB of %s: memlock limit (ulimit -l %llu KiB) "
					     "or the module's pin_limit_mb (%llu MiB, %llu KiB pinned now): raise "
					     "the limit or run as root",
					 p->who, d->len >> 10, what,
					 rl.rlim_cur == RLIM_INFINITY ? 0ULL : (unsigned long long)rl.rlim_cur >> 10,
					 (unsigned long long)p->info.pin_limit >> 20,
					 (unsigned long long)p->info.pinned >> 10);
	}
	case -EPERM:
		return gpunvme_set_error(rc, "%s: mapping %s needs CAP_SYS_RAWIO (another device's memory): run as root",
					 p->who, what);
	case -ERANGE:
		return gpunvme_set_error(rc, "%s: %s: %zu bytes at offset 0x%llx run past its end", p->who, what,
					 d->len, (unsigned long long)m->addr);
	case -EHOSTDOWN:
		return gpunvme_set_error(rc, "%s: %s: the device decodes no memory (PCI command register): "
					     "echo 1 > /sys/bus/pci/devices/%.16s/enable",
					 p->who, what, m->peer);
	case -ENXIO:
		return gpunvme_set_error(rc, "%s: %s: BAR %u is not a memory BAR", p->who, what, m->bar);
	case -ENOENT:
		return gpunvme_set_error(rc, "%s: %s: nvidia_p2p_get_pages is not available (nvidia.ko not loaded, "
					     "or a kernel whose symbol_get only finds GPL exports, 6.6 and later)",
					 p->who, what);
	case -EINVAL:
		return gpunvme_set_error(rc, "%s: %s: refused (alignment: 4 KiB for memory and dma-buf offsets, "
					     "64 KiB for nvidia_p2p; or the exporter returned pieces that are not "
					     "whole 4 KiB pages)",
					 p->who, what);
	default:
		return gpunvme_set_error(rc, "%s: mapping %zu KiB of %s: %s", p->who, d->len >> 10, what,
					 strerror(-rc));
	}
}

static struct kmod_dma *dma_new(size_t len)
{
	struct kmod_dma *d = calloc(1, sizeof(*d) + len / KPAGE * sizeof(uint64_t));

	if (d)
		d->len = len;
	return d;
}

static int kmod_dma_alloc(struct gpunvme_bus *b, size_t len, void **va, void **handle)
{
	struct kmod_priv *p = b->priv;
	struct gpunvme_kmod_map m = {.kind = GPUNVME_KMOD_USER};
	struct kmod_dma *d;
	void *mem = MAP_FAILED;
	int rc;

	if (!len)
		return gpunvme_set_error(-EINVAL, "%s: DMA allocation of 0 bytes", p->who);
	len = (len + KPAGE - 1) & ~(size_t)(KPAGE - 1);
	/* Hugepages where they exist: 2 MiB runs the IOMMU can map as one. */
	if (len >= SZ_2M) {
		size_t hl = (len + SZ_2M - 1) & ~(size_t)(SZ_2M - 1);

		mem = mmap(NULL, hl, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB | MAP_POPULATE, -1, 0);
		if (mem != MAP_FAILED)
			len = hl;
	}
	if (mem == MAP_FAILED)
		mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (mem == MAP_FAILED)
		return gpunvme_set_error(-errno, "%s: cannot allocate %zu KiB: %s", p->who, len >> 10,
					 strerror(errno));
	/* A fork() child must not make the pinned pages copy-on-write. */
	madvise(mem, len, MADV_DONTFORK);
	d = dma_new(len);
	if (!d) {
		munmap(mem, len);
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
	}
	d->va = mem;
	d->owned = 1;
	m.addr = (uint64_t)(uintptr_t)mem;
	rc = kmod_map(p, d, &m, "host memory");
	if (rc) {
		munmap(mem, len);
		free(d);
		return rc;
	}
	*va = mem;
	*handle = d;
	return 0;
}

static void kmod_dma_free(struct gpunvme_bus *b, void *va, size_t len, void *handle)
{
	struct kmod_priv *p = b->priv;
	struct kmod_dma *d = handle;

	(void)va;
	(void)len;
	if (!d)
		return;
	/* Unmap (and unpin) before the pages go back; on failure the pages
	 * stay mapped and are leaked on purpose rather than reused under a
	 * live mapping. The module drops them at close. */
	if (ioctl(p->fd, GPUNVME_KMOD_UNMAP, &d->handle) == 0 && d->owned)
		munmap(d->va, d->len);
	free(d);
}

static uint64_t kmod_iova_of(struct gpunvme_bus *b, void *handle, size_t off)
{
	struct kmod_dma *d = handle;

	(void)b;
	if (off >= d->len)
		return 0;
	return d->table[off / KPAGE] + off % KPAGE;
}

static size_t kmod_contig(struct gpunvme_bus *b, void *handle)
{
	(void)b;
	return ((struct kmod_dma *)handle)->contig;
}

static int kmod_dma_import(struct gpunvme_bus *b, const struct gpunvme_dma_src *src, void *va, size_t len,
			   void **handle)
{
	struct kmod_priv *p = b->priv;
	struct gpunvme_kmod_map m = {0};
	struct kmod_dma *d;
	const char *what;
	int rc;

	if (!len || len % KPAGE || (uintptr_t)va % KPAGE || src->offset % KPAGE)
		return gpunvme_set_error(-EINVAL, "%s: import of %zu bytes at %p, offset 0x%llx: address, length "
						  "and offset must be multiples of 4 KiB",
					 p->who, len, va, (unsigned long long)src->offset);
	m.addr = src->offset;
	switch (src->kind) {
	case GPUNVME_DMA_SRC_DMABUF:
		m.kind = GPUNVME_KMOD_DMABUF;
		m.fd = src->fd;
		what = "a dma-buf";
		break;
	case GPUNVME_DMA_SRC_PEER:
		if (!src->peer || gpunvme_pci_parse_bdf(src->peer, m.peer))
			return gpunvme_set_error(-EINVAL, "%s: peer device \"%s\" is not a PCI address (DDDD:BB:DD.F)",
						 p->who, src->peer ? src->peer : "");
		m.kind = GPUNVME_KMOD_PEER;
		m.bar = src->bar;
		what = "a peer device's BAR";
		break;
	case GPUNVME_DMA_SRC_NVP2P:
		m.kind = GPUNVME_KMOD_NVP2P;
		what = "GPU memory through nvidia_p2p";
		break;
	default:
		return gpunvme_set_error(-EINVAL, "%s: unknown DMA source kind %d", p->who, src->kind);
	}
	d = dma_new(len);
	if (!d)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
	d->va = va;
	rc = kmod_map(p, d, &m, what);
	if (rc) {
		free(d);
		return rc;
	}
	*handle = d;
	return 0;
}

/*
 * GPU memory: CUDA exported it as a dma-buf (m->has_dmabuf), or NVIDIA's
 * legacy P2P interface pins it by device address. Every 4 KiB page gets its
 * own bus address (device_table); *iova is the first.
 */
static int kmod_map_device(struct gpunvme_bus *b, const struct gpunvme_devmem *m, uint64_t *iova)
{
	struct kmod_priv *p = b->priv;
	struct gpunvme_kmod_map km = {0};
	struct kmod_dma *d;
	size_t len = (m->len + KPAGE - 1) & ~(size_t)(KPAGE - 1);
	int rc;

	if (m->addr % KPAGE)
		return gpunvme_set_error(-EINVAL, "%s: GPU memory at 0x%llx: Tier 2 on kmod: needs 4 KiB aligned "
						  "buffers (gpunvme_gpu_buf_device allocates them so)",
					 p->who, (unsigned long long)m->addr);
	if (m->has_dmabuf) {
		km.kind = GPUNVME_KMOD_DMABUF;
		km.fd = m->dmabuf_fd;
		km.addr = m->dmabuf_off;
	} else {
		km.kind = GPUNVME_KMOD_NVP2P;
		km.addr = m->addr;
	}
	d = dma_new(len);
	if (!d)
		return gpunvme_set_error(-ENOMEM, "%s: out of memory", p->who);
	rc = kmod_map(p, d, &km, m->has_dmabuf ? "GPU memory (dma-buf)" : "GPU memory through nvidia_p2p");
	if (rc) {
		free(d);
		return rc;
	}
	pthread_mutex_lock(&p->lock);
	d->next = p->devmaps;
	p->devmaps = d;
	pthread_mutex_unlock(&p->lock);
	*iova = d->table[0];
	return 0;
}

static struct kmod_dma *devmap_find(struct kmod_priv *p, uint64_t iova, int unlink)
{
	struct kmod_dma **pp, *d = NULL;

	pthread_mutex_lock(&p->lock);
	for (pp = &p->devmaps; *pp; pp = &(*pp)->next) {
		if ((*pp)->table[0] == iova) {
			d = *pp;
			if (unlink)
				*pp = d->next;
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return d;
}

static int kmod_unmap_device(struct gpunvme_bus *b, uint64_t iova)
{
	struct kmod_priv *p = b->priv;
	struct kmod_dma *d = devmap_find(p, iova, 1);
	int rc;

	if (!d)
		return -ENOENT;
	rc = ioctl(p->fd, GPUNVME_KMOD_UNMAP, &d->handle) ? -errno : 0;
	free(d);
	return rc;
}

static int kmod_device_table(struct gpunvme_bus *b, uint64_t iova, const uint64_t **table, size_t *n)
{
	struct kmod_dma *d = devmap_find(b->priv, iova, 0);

	if (!d)
		return -ENOENT;
	*table = d->table;
	*n = d->len / KPAGE;
	return 0;
}

const struct gpunvme_bus_ops gpunvme_bus_kmod = {
	.name = "kmod",
	/* GPU pages through the module (dma-buf, nvidia_p2p) */
	.caps = GPUNVME_CAP_DEVMEM_DMA | GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_DOORBELL_MMIO | GPUNVME_CAP_DEEP_QUEUES,
	.open = kmod_open,
	.close = kmod_close,
	.dma_alloc = kmod_dma_alloc,
	.dma_free = kmod_dma_free,
	.iova_of = kmod_iova_of,
	.contig = kmod_contig,
	.map_device = kmod_map_device,
	.unmap_device = kmod_unmap_device,
	.dma_import = kmod_dma_import,
	.device_table = kmod_device_table,
};
