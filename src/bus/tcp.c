/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The bus of a controller behind NVMe/TCP: memory only. There is no BAR
 * (bar0 stays NULL) and no DMA: data lands in host memory through the
 * socket (src/nvmf), so "DMA memory" is ordinary anonymous memory, locked
 * when the limit allows (the GPU path registers it with the GPU as Tier 1
 * buffers), and its "bus address" is its virtual address. Registers and
 * queues are src/nvmf's business.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "bus/bus.h"

static int tcp_open(struct gpunvme_bus *b, const char *addr, const struct gpunvme_opts *opts)
{
	(void)opts;
	if (strncmp(addr, "//", 2))
		return gpunvme_set_error(-EINVAL, "tcp:%s: expected tcp://HOST:PORT/SUBNQN", addr);
	b->bar0 = NULL;
	b->bar0_len = 0;
	return 0;
}

static void tcp_close(struct gpunvme_bus *b)
{
	(void)b;
}

static int tcp_dma_alloc(struct gpunvme_bus *b, size_t len, void **va, void **handle)
{
	(void)b;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return gpunvme_set_error(-ENOMEM, "cannot allocate %zu bytes of buffer memory", len);
	/* best effort: unlocked memory works, the receive path only slows
	 * down on page faults */
	(void)mlock(p, len);
	*va = p;
	*handle = p;
	return 0;
}

static void tcp_dma_free(struct gpunvme_bus *b, void *va, size_t len, void *handle)
{
	(void)b;
	(void)handle;
	munlock(va, len);
	munmap(va, len);
}

static uint64_t tcp_iova_of(struct gpunvme_bus *b, void *handle, size_t off)
{
	(void)b;
	return (uint64_t)(uintptr_t)handle + off;
}

static size_t tcp_contig(struct gpunvme_bus *b, void *handle)
{
	(void)b;
	(void)handle;
	return SIZE_MAX;
}

const struct gpunvme_bus_ops gpunvme_bus_tcp = {
	.name = "tcp",
	/* doorbells are a host page the CPU proxies read; few requests per
	 * connection (nvmet-tcp keeps a buffer per entry); no DMA at all */
	.caps = GPUNVME_CAP_GPU_QUEUES,
	.open = tcp_open,
	.close = tcp_close,
	.dma_alloc = tcp_dma_alloc,
	.dma_free = tcp_dma_free,
	.iova_of = tcp_iova_of,
	.contig = tcp_contig,
	/* GPU memory: through Tier 1 buffers and the copy engine (docs/nvme-tcp.md) */
	.map_device = NULL,
	.unmap_device = NULL,
};
