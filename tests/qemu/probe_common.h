/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Minimal polled NVMe driver shared by the QEMU guest probes (probe_vfio,
 * probe_uio). The bus-specific part (BAR0 mapping, DMA memory and its bus
 * address) is set up by each probe; this file drives the controller through
 * one DMA region laid out as below. It exists to prove the QEMU harness and
 * the buses; the project's real driver lives in src/.
 */
#ifndef GPUNVME_QEMU_PROBE_COMMON_H
#define GPUNVME_QEMU_PROBE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <gpunvme/spec/nvme.h>

/* One 2 MiB DMA region, page offsets: */
#define PROBE_MEM_SIZE   (2u << 20)
#define PROBE_OFF_ASQ    0x0000u
#define PROBE_OFF_ACQ    0x1000u
#define PROBE_OFF_IOSQ   0x2000u
#define PROBE_OFF_IOCQ   0x3000u
#define PROBE_OFF_ID     0x4000u   /* identify / log buffer */
#define PROBE_OFF_PRPL   0x5000u   /* one PRP list page */
#define PROBE_OFF_DATA   0x100000u /* data buffer */
#define PROBE_DATA_MAX   0x100000u /* 1 MiB */
#define PROBE_QDEPTH     64u

struct probe_q {
	uint32_t sq_off, cq_off;  /* offsets in the DMA region */
	uint16_t qid, tail, head, phase;
};

struct probe {
	const char *name;          /* "vfio" / "uio", for messages */
	volatile uint8_t *bar;     /* BAR0 */
	size_t bar_len;
	uint8_t *mem;              /* DMA region, PROBE_MEM_SIZE bytes */
	uint64_t iova;             /* bus address of mem[0] */
	uint64_t cap;
	uint32_t dstrd;
	uint32_t timeout_ms;       /* CAP.TO */
	uint32_t page;             /* 4096 (CC.MPS = 0) */
	uint32_t max_xfer;         /* bytes per command (MDTS, PRP list, buffer) */
	uint16_t cid;
	struct probe_q aq, ioq;
	int io_ready;
	uint32_t nsid;
	uint32_t lba_size;
	uint64_t nsze;
	char model[41];
};

/* Status returned by probe_admin/probe_io: an NVMe status value (nvme.h
 * layout), or PROBE_TIMEOUT when no completion arrived. */
#define PROBE_TIMEOUT 0xffffffffu

uint32_t probe_rd32(struct probe *p, uint32_t off);
void probe_wr32(struct probe *p, uint32_t off, uint32_t v);
uint64_t probe_rd64(struct probe *p, uint32_t off);

/* Print CAP, VS, CSTS, CC. */
void probe_print_regs(struct probe *p);
/* Reset and enable with admin queues in the DMA region. 0 on success. */
int probe_enable(struct probe *p);
/* Submit one admin command, wait for its completion (cqe may be NULL). */
uint32_t probe_admin(struct probe *p, struct gpunvme_sqe *cmd, struct gpunvme_cqe *cqe);
/* Identify Controller + namespace list + namespace p->nsid; create I/O queue
 * pair 1. 0 on success. */
int probe_identify_and_queues(struct probe *p);
/* Read or write (opc) bytes at byte offset off of namespace p->nsid, data
 * at PROBE_OFF_DATA + data_off, split by max_xfer. Returns the status of the
 * first failing command or 0. */
uint32_t probe_rw(struct probe *p, uint8_t opc, uint64_t off, uint32_t bytes, uint32_t data_off);
/* One I/O command with explicit PRPs (for fault tests). */
uint32_t probe_io_raw(struct probe *p, uint8_t opc, uint64_t slba, uint16_t nlb0,
		      uint64_t prp1, uint64_t prp2);
/* Delete I/O queues, normal shutdown, disable. 0 on success. */
int probe_shutdown(struct probe *p);

/* Common command line, run after the bus set-up:
 *   --nsid N                 namespace for the following I/O (default 1)
 *   --write OFFSET BYTES FILE  write a pattern at byte OFFSET, save it to FILE
 *   --verify OFFSET FILE       read FILE's length at OFFSET, compare with FILE
 *   --fault                    unmapped-IOVA tests (calls fault_test)
 * Returns the process exit status (0 pass, 1 fail, 77 skip). */
typedef int (*probe_fault_fn)(struct probe *p, void *ctx);
int probe_main(struct probe *p, int argc, char **argv, probe_fault_fn fault_test, void *ctx);

/* Physical address of a locked virtual address via /proc/self/pagemap, or 0. */
uint64_t probe_virt_to_phys(const void *va);

const char *probe_status_str(uint32_t st);

#endif
