/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * probe_vfio: drive an NVMe controller bound to vfio-pci from user space,
 * inside the QEMU test guest (IOMMU: QEMU's intel-iommu).
 *
 *   probe_vfio BDF [--nsid N] [--write OFF BYTES FILE] [--verify OFF FILE]
 *              [--fault | --fault-strict]
 *
 * Opens the container and the device's IOMMU group, sets the type1 IOMMU,
 * maps BAR0, reads CAP/VS/CSTS, maps a 2 MiB buffer at IOVA PROBE_IOVA
 * (VFIO_IOMMU_MAP_DMA), enables the controller with its admin queues in that
 * buffer and sends Identify. --fault checks that DMA to IOVAs that were never
 * mapped is stopped by the IOMMU: the guard pages next to the mapped buffer
 * and the buffer itself stay untouched and the controller keeps working. The
 * completion status is reported; --fault-strict also requires it to be an
 * error. QEMU 7.2's NVMe controller ignores DMA errors: the guest kernel logs
 * the DMAR fault, yet the command completes successfully (a controller-to-host
 * transfer is dropped; a host-to-controller transfer consumes undefined data,
 * so a faulting Write still changes the block).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/vfio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "probe_common.h"

#define PROBE_IOVA 0x10000000ull  /* deliberately far from the buffer's physical address */
#define GUARD_SIZE 0x4000u        /* unmapped pages right after the buffer */
#define FAR_IOVA 0x40000000ull    /* never mapped */

struct vfio_ctx {
	int container, group, device;
	uint8_t *guard;
	int strict;          /* --fault-strict: error status required */
	int silent_success;  /* faulting commands that completed successfully */
};

static int cfg_rw(int device, int write, uint32_t off, void *buf, size_t len)
{
	struct vfio_region_info ri = { .argsz = sizeof(ri), .index = VFIO_PCI_CONFIG_REGION_INDEX };
	if (ioctl(device, VFIO_DEVICE_GET_REGION_INFO, &ri))
		return -1;
	ssize_t n = write ? pwrite(device, buf, len, (off_t)(ri.offset + off))
			  : pread(device, buf, len, (off_t)(ri.offset + off));
	return n == (ssize_t)len ? 0 : -1;
}

static int check_guard(const uint8_t *g, uint8_t v)
{
	for (uint32_t i = 0; i < GUARD_SIZE; i++)
		if (g[i] != v)
			return (int)i + 1;
	return 0;
}

/* One command to an unmapped IOVA: expect an error status, untouched
 * guard and buffer, and a working controller afterwards. */
static int expect_dma_fault(struct probe *p, struct vfio_ctx *v, const char *what, uint32_t st)
{
	int bad = 0;
	printf("vfio: fault test \"%s\": status 0x%03x: %s\n", what, st, probe_status_str(st));
	if (st == PROBE_TIMEOUT) {
		bad = 1;
	} else if (st == 0) {
		v->silent_success++;
		if (v->strict) {
			fprintf(stderr, "vfio: %s: expected an error completion\n", what);
			bad = 1;
		}
	}
	int g = check_guard(v->guard, 0x5a);
	if (g) {
		fprintf(stderr, "vfio: %s: guard memory changed at +%d\n", what, g - 1);
		bad = 1;
	}
	uint32_t csts = probe_rd32(p, GPUNVME_REG_CSTS);
	if (gpunvme_csts_cfs(csts) || !gpunvme_csts_rdy(csts)) {
		fprintf(stderr, "vfio: %s: controller not ready afterwards (CSTS 0x%x)\n", what, csts);
		bad = 1;
	}
	return bad;
}

static int fault_test(struct probe *p, void *ctx)
{
	struct vfio_ctx *v = ctx;
	int bad = 0;
	uint64_t end_iova = p->iova + PROBE_MEM_SIZE;  /* first unmapped IOVA after the buffer */
	uint8_t *id = p->mem + PROBE_OFF_ID;

	memset(v->guard, 0x5a, GUARD_SIZE);

	/* 1. Identify (controller writes host memory) to the IOVA right after the
	 *    mapped buffer: in the process's address space that is the guard. */
	memset(id, 0xa5, 4096);
	struct gpunvme_sqe c = { .opc = GPUNVME_ADM_IDENTIFY, .prp1 = end_iova };
	c.identify.cns = GPUNVME_CNS_CTRL;
	bad |= expect_dma_fault(p, v, "Identify to unmapped IOVA after the buffer", probe_admin(p, &c, NULL));

	/* 2. Identify to a far unmapped IOVA. */
	c.prp1 = FAR_IOVA;
	bad |= expect_dma_fault(p, v, "Identify to far unmapped IOVA", probe_admin(p, &c, NULL));
	for (int i = 0; i < 4096; i++)
		if (id[i] != 0xa5) {
			fprintf(stderr, "vfio: identify buffer changed at +%d by a faulting command\n", i);
			bad = 1;
			break;
		}

	/* 3. Write (controller reads host memory) from an unmapped IOVA; the
	 *    block must keep its old contents. */
	uint32_t lbs = p->lba_size;
	uint64_t lba = (4u << 20) / lbs;  /* scratch block at 4 MiB */
	if (lba + 1 < p->nsze) {
		uint8_t *buf = p->mem + PROBE_OFF_DATA;
		memset(buf, 0x11, lbs);
		uint32_t st = probe_io_raw(p, GPUNVME_CMD_WRITE, lba, 0, p->iova + PROBE_OFF_DATA, 0);
		if (st) {
			fprintf(stderr, "vfio: scratch write failed: %s\n", probe_status_str(st));
			bad = 1;
		}
		bad |= expect_dma_fault(p, v, "Write from unmapped IOVA",
					probe_io_raw(p, GPUNVME_CMD_WRITE, lba, 0, end_iova, 0));
		memset(buf, 0, lbs);
		st = probe_io_raw(p, GPUNVME_CMD_READ, lba, 0, p->iova + PROBE_OFF_DATA, 0);
		int changed = 0;
		for (uint32_t i = 0; i < lbs; i++)
			changed |= buf[i] != 0x11;
		if (st) {
			fprintf(stderr, "vfio: read of the scratch block failed: %s\n", probe_status_str(st));
			bad = 1;
		} else if (changed) {
			/* The IOMMU kept host memory safe; what reached the medium is
			 * the controller's business (QEMU writes its bounce buffer). */
			printf("vfio: block targeted by the faulting Write CHANGED: now %02x %02x %02x %02x ...%s\n",
			       buf[0], buf[1], buf[2], buf[3], v->strict ? "" : " (tolerated)");
			if (v->strict)
				bad = 1;
		} else {
			printf("vfio: block targeted by the faulting Write kept its contents\n");
		}
		/* 4. Read (controller writes host memory) into an unmapped IOVA. */
		bad |= expect_dma_fault(p, v, "Read into unmapped IOVA",
					probe_io_raw(p, GPUNVME_CMD_READ, lba, 0, end_iova, 0));
	}

	/* The controller must still work. */
	c.prp1 = p->iova + PROBE_OFF_ID;
	uint32_t st = probe_admin(p, &c, NULL);
	const struct gpunvme_id_ctrl *idc = (const struct gpunvme_id_ctrl *)id;
	if (st || memcmp(idc->mn, p->model, strlen(p->model))) {
		fprintf(stderr, "vfio: Identify after the faults failed: %s\n", probe_status_str(st));
		bad = 1;
	} else {
		printf("vfio: Identify after the faults OK, CSTS 0x%x\n", probe_rd32(p, GPUNVME_REG_CSTS));
	}
	if (v->silent_success)
		printf("vfio: NOTE: %d faulting command(s) completed with success status: the controller "
		       "ignores DMA errors (QEMU 7.2 does); the IOMMU still blocked the accesses\n",
		       v->silent_success);
	return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr,
			"usage: %s BDF [--nsid N] [--write OFF BYTES FILE] [--verify OFF FILE] [--fault|--fault-strict]\n",
			argv[0]);
		return 2;
	}
	const char *bdf = argv[1];
	if (!strncmp(bdf, "vfio:", 5))
		bdf += 5;
	struct vfio_ctx v = { -1, -1, -1, NULL };

	/* Container */
	v.container = open("/dev/vfio/vfio", O_RDWR);
	if (v.container < 0) {
		fprintf(stderr, "vfio: /dev/vfio/vfio: %s\n", strerror(errno));
		return 77;
	}
	int api = ioctl(v.container, VFIO_GET_API_VERSION);
	if (api != VFIO_API_VERSION || !ioctl(v.container, VFIO_CHECK_EXTENSION, VFIO_TYPE1_IOMMU)) {
		fprintf(stderr, "vfio: API %d or no type1 IOMMU\n", api);
		return 1;
	}
	int type = ioctl(v.container, VFIO_CHECK_EXTENSION, VFIO_TYPE1v2_IOMMU) ? VFIO_TYPE1v2_IOMMU : VFIO_TYPE1_IOMMU;

	/* Group of the device */
	char path[PATH_MAX], link[PATH_MAX];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group", bdf);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n < 0) {
		fprintf(stderr, "vfio: %s: %s (no IOMMU?)\n", path, strerror(errno));
		return 1;
	}
	link[n] = 0;
	const char *grp = strrchr(link, '/') ? strrchr(link, '/') + 1 : link;
	snprintf(path, sizeof(path), "/dev/vfio/%.32s", grp);
	v.group = open(path, O_RDWR);
	if (v.group < 0) {
		fprintf(stderr, "vfio: %s: %s\n", path, strerror(errno));
		return 1;
	}
	struct vfio_group_status gs = { .argsz = sizeof(gs) };
	if (ioctl(v.group, VFIO_GROUP_GET_STATUS, &gs) || !(gs.flags & VFIO_GROUP_FLAGS_VIABLE)) {
		fprintf(stderr, "vfio: group %s not viable (all its devices must be bound to vfio-pci)\n", grp);
		return 1;
	}
	if (ioctl(v.group, VFIO_GROUP_SET_CONTAINER, &v.container)) {
		fprintf(stderr, "vfio: VFIO_GROUP_SET_CONTAINER: %s\n", strerror(errno));
		return 1;
	}
	if (ioctl(v.container, VFIO_SET_IOMMU, type)) {
		fprintf(stderr, "vfio: VFIO_SET_IOMMU: %s\n", strerror(errno));
		return 1;
	}
	struct vfio_iommu_type1_info ii = { .argsz = sizeof(ii) };
	if (ioctl(v.container, VFIO_IOMMU_GET_INFO, &ii) == 0)
		printf("vfio: group %s, IOMMU type1%s, page sizes 0x%llx\n", grp,
		       type == VFIO_TYPE1v2_IOMMU ? "v2" : "", (unsigned long long)ii.iova_pgsizes);

	/* Device */
	v.device = ioctl(v.group, VFIO_GROUP_GET_DEVICE_FD, bdf);
	if (v.device < 0) {
		fprintf(stderr, "vfio: VFIO_GROUP_GET_DEVICE_FD %s: %s\n", bdf, strerror(errno));
		return 1;
	}
	struct vfio_device_info di = { .argsz = sizeof(di) };
	if (ioctl(v.device, VFIO_DEVICE_GET_INFO, &di) || !(di.flags & VFIO_DEVICE_FLAGS_PCI)) {
		fprintf(stderr, "vfio: VFIO_DEVICE_GET_INFO failed or not PCI\n");
		return 1;
	}
	printf("vfio: device %s: %u regions, %u irqs%s\n", bdf, di.num_regions, di.num_irqs,
	       di.flags & VFIO_DEVICE_FLAGS_RESET ? ", reset supported" : "");
	struct vfio_region_info ri = { .argsz = sizeof(ri), .index = VFIO_PCI_BAR0_REGION_INDEX };
	if (ioctl(v.device, VFIO_DEVICE_GET_REGION_INFO, &ri) || !(ri.flags & VFIO_REGION_INFO_FLAG_MMAP)) {
		fprintf(stderr, "vfio: BAR0 region info failed or not mappable\n");
		return 1;
	}
	void *bar = mmap(NULL, ri.size, PROT_READ | PROT_WRITE, MAP_SHARED, v.device, (off_t)ri.offset);
	if (bar == MAP_FAILED) {
		fprintf(stderr, "vfio: mmap BAR0: %s\n", strerror(errno));
		return 1;
	}
	printf("vfio: BAR0 %llu bytes at region offset 0x%llx\n", (unsigned long long)ri.size,
	       (unsigned long long)ri.offset);

	/* Bus mastering and memory decoding (config space command register). */
	uint16_t cmd = 0;
	if (cfg_rw(v.device, 0, 4, &cmd, 2) == 0) {
		cmd |= 0x6;
		if (cfg_rw(v.device, 1, 4, &cmd, 2))
			fprintf(stderr, "vfio: cannot write the PCI command register\n");
	}

	/* DMA buffer + guard pages: map only the buffer. */
	uint8_t *mem = mmap(NULL, PROBE_MEM_SIZE + GUARD_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			    -1, 0);
	if (mem == MAP_FAILED) {
		fprintf(stderr, "vfio: mmap buffer: %s\n", strerror(errno));
		return 1;
	}
	memset(mem, 0, PROBE_MEM_SIZE + GUARD_SIZE);
	v.guard = mem + PROBE_MEM_SIZE;
	struct vfio_iommu_type1_dma_map dm = {
		.argsz = sizeof(dm),
		.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
		.vaddr = (uintptr_t)mem,
		.iova = PROBE_IOVA,
		.size = PROBE_MEM_SIZE,
	};
	if (ioctl(v.container, VFIO_IOMMU_MAP_DMA, &dm)) {
		fprintf(stderr, "vfio: VFIO_IOMMU_MAP_DMA: %s\n", strerror(errno));
		return 1;
	}
	uint64_t pa = probe_virt_to_phys(mem);
	printf("vfio: DMA buffer %u KiB at IOVA 0x%llx (physical address of its first page 0x%" PRIx64 ")\n",
	       PROBE_MEM_SIZE >> 10, PROBE_IOVA, pa);

	/* --fault-strict is --fault requiring error completions. */
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--fault-strict")) {
			v.strict = 1;
			argv[i] = "--fault";
		}
	struct probe p = { .name = "vfio", .bar = bar, .bar_len = ri.size, .mem = mem, .iova = PROBE_IOVA };
	int rc = probe_main(&p, argc - 2, argv + 2, fault_test, &v);

	struct vfio_iommu_type1_dma_unmap du = { .argsz = sizeof(du), .iova = PROBE_IOVA, .size = PROBE_MEM_SIZE };
	if (ioctl(v.container, VFIO_IOMMU_UNMAP_DMA, &du)) {
		fprintf(stderr, "vfio: VFIO_IOMMU_UNMAP_DMA: %s\n", strerror(errno));
		rc = 1;
	}
	munmap(bar, ri.size);
	close(v.device);
	close(v.group);
	close(v.container);
	printf("vfio: %s\n", rc == 0 ? "PASS" : rc == 77 ? "SKIP" : "FAIL");
	return rc;
}
