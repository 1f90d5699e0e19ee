/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The gpunvme kernel module under hostile and careless use, in the QEMU
 * guest (scenarios/kmod_hostile.sh). Raw open/ioctl/mmap on
 * /dev/gpunvme/<BDF>: nothing here goes through the library, whose own
 * argument checks would hide the module's. NVMe commands, where a check
 * needs real DMA, are issued by the minimal polled driver of
 * probe_common.c through the BAR0 mapping and memory mapped by the module.
 *
 *   kmod_fuzz fuzz BDF [--seconds N] [--seed S] [--threads T] [--peer BDF]
 *       seeded random and structure-aware sequences of the module's ioctls
 *       (known and unknown numbers, every _IOC size, hostile fields), BAR0
 *       mmap/munmap/mremap, fork/exec with the BAR mapped, threads mapping
 *       and unmapping the same memory, close with mappings held; real reads
 *       into mapped memory between poisoned guard pages. Oracle here:
 *       errnos, the returned tables (noiommu: each entry is the page's
 *       physical address), the guards, the read data, and the module's
 *       `pinned` and this process's VmLck back at their start values after
 *       close. The scenario checks the kernel log and the DMAR fault log.
 *   kmod_fuzz unmap-inflight BDF    UNMAP with reads in flight: retired
 *   kmod_fuzz remove-inflight BDF   PCI remove with an owner reading
 *   kmod_fuzz unbind-inflight BDF   driver unbind with an owner reading
 *   kmod_fuzz mmap-unbind BDF       BAR0 mmap racing a driver unbind: no
 *                                   mapping reaches the registers after
 *   kmod_fuzz rmmod-open BDF        rmmod refused while open or mapped
 *   kmod_fuzz two-openers BDF       a second open refused, also via fork
 *   kmod_fuzz memlock BDF           many small maps as nobody, low memlock
 *   kmod_fuzz mmap-bounds BDF       BAR0 mmap outside BAR0 / wrong size
 *   kmod_fuzz fault-stall BDF       a MAP stuck in a userfaultfd fault
 *                                   blocks nobody else
 *
 * Prints PASS/FAIL lines; exit 0 only if every check passed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/dma-buf.h>

#include "drm_uapi.h"
#include "gpunvme/uapi/kmod.h"
#include "gpunvme/spec/nvme.h"
#include "probe_common.h"

#define PG 4096u

static atomic_int g_fails;
static int g_verbose = 1;

#define FAILF(...)                                                                                                     \
	do {                                                                                                           \
		printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                            \
		printf(__VA_ARGS__);                                                                                   \
		printf("\n");                                                                                          \
		fflush(stdout);                                                                                        \
		atomic_fetch_add(&g_fails, 1);                                                                         \
	} while (0)
#define CHECKF(cond, ...)                                                                                              \
	do {                                                                                                           \
		if (cond) {                                                                                            \
			if (g_verbose) {                                                                               \
				printf("PASS ");                                                                       \
				printf(__VA_ARGS__);                                                                   \
				printf("\n");                                                                          \
			}                                                                                              \
		} else {                                                                                               \
			FAILF(__VA_ARGS__);                                                                            \
		}                                                                                                      \
	} while (0)

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* ---- random numbers: xorshift64*, one state per thread ----------------- */
struct rng {
	uint64_t s;
};
static uint64_t rnd(struct rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 2685821657736338717ull;
}
static uint64_t rndn(struct rng *r, uint64_t n)
{
	return n ? rnd(r) % n : 0;
}
static int chance(struct rng *r, unsigned pct)
{
	return rndn(r, 100) < pct;
}

/* ---- the device ------------------------------------------------------- */
static char g_dev[64];
static char g_bdf[32];
static atomic_ulong g_ioctls;
static atomic_uint g_maxh; /* the largest handle seen: the leak hunt at the end */

static long kio(int fd, unsigned long cmd, void *arg)
{
	atomic_fetch_add(&g_ioctls, 1);
	return ioctl(fd, cmd, arg);
}

static int dev_open(void)
{
	return open(g_dev, O_RDWR | O_CLOEXEC);
}

static int kinfo(int fd, struct gpunvme_kmod_info *in)
{
	memset(in, 0, sizeof(*in));
	return kio(fd, GPUNVME_KMOD_INFO, in) ? -errno : 0;
}

/* The scenarios' first step: the device open (and its INFO), or a FAIL
 * line saying why and -1. */
static int dev_open_or_fail(void)
{
	int fd = dev_open();
	if (fd < 0)
		FAILF("open %s: %s", g_dev, strerror(errno));
	return fd;
}

static int dev_open_info(struct gpunvme_kmod_info *in)
{
	int fd = dev_open_or_fail();
	int rc = fd < 0 ? 0 : kinfo(fd, in);
	if (rc) {
		FAILF("INFO on %s: %s", g_dev, strerror(-rc));
		close(fd);
		return -1;
	}
	return fd;
}

/* bytes the module says it has pinned, or -errno */
static int64_t kpinned(int fd)
{
	struct gpunvme_kmod_info in;
	int rc = kinfo(fd, &in);
	return rc ? rc : (int64_t)in.pinned;
}

static int kmap(int fd, uint32_t kind, int dfd, uint64_t addr, uint64_t len, uint64_t *table, uint32_t *handle)
{
	struct gpunvme_kmod_map m = { .kind = kind, .fd = dfd, .addr = addr, .len = len };
	m.table = (uint64_t)(uintptr_t)table;
	m.table_entries = len / PG;
	if (kio(fd, GPUNVME_KMOD_MAP, &m))
		return -errno;
	*handle = m.handle;
	if (m.handle > atomic_load(&g_maxh))
		atomic_store(&g_maxh, m.handle);
	return 0;
}

static int kunmap(int fd, uint32_t h)
{
	return kio(fd, GPUNVME_KMOD_UNMAP, &h) ? -errno : 0;
}

/* VmLck of a process in KiB (the locked_vm the module charges), or -1 */
static long vmlck_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static int sysfs_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t w = write(fd, val, strlen(val));
	int rc = w == (ssize_t)strlen(val) ? 0 : -errno;
	close(fd);
	return rc;
}

static uint16_t pci_command(const char *bdf)
{
	char path[96];
	uint16_t cmd = 0xffff;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", bdf);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (pread(fd, &cmd, 2, 4) != 2)
			cmd = 0xffff;
		close(fd);
	}
	return cmd;
}

/* stdout off while probe_common.c chatters (it is run many times) */
static int quiet_fd = -1;
static void quiet(int on)
{
	fflush(stdout);
	if (on && quiet_fd < 0) {
		quiet_fd = dup(1);
		int n = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (n >= 0) {
			dup2(n, 1);
			close(n);
		}
	} else if (!on && quiet_fd >= 0) {
		dup2(quiet_fd, 1);
		close(quiet_fd);
		quiet_fd = -1;
	}
}

/* ---- raw NVMe through the module: probe_common.c on mapped memory ------ */
struct nv {
	int fd;
	volatile uint8_t *bar;
	size_t bar_len;
	struct probe p;
	uint8_t *mem;       /* PROBE_MEM_SIZE, physically contiguous (huge page) */
	uint32_t mem_handle;
	int mem_mapped;
	int ready;
	unsigned outstanding;
};

/* The disk region the fuzzer owns: written with a pattern at start. */
#define FZ_DISK_OFF ((uint64_t)32 << 20)
#define FZ_DISK_LEN ((uint64_t)1 << 20)

static uint8_t pat_byte(uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull ^ 0xd1b54a32d192ed03ull;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint8_t)(x >> (8 * (off & 7)));
}

static int nv_map_bar(struct nv *n)
{
	struct gpunvme_kmod_info in;
	if (kinfo(n->fd, &in))
		return -1;
	n->bar_len = in.bar0_len;
	void *b = mmap(NULL, n->bar_len, PROT_READ | PROT_WRITE, MAP_SHARED, n->fd, 0);
	if (b == MAP_FAILED)
		return -1;
	n->bar = b;
	return 0;
}

/* Map the queue memory (one 2 MiB huge page: contiguous bus addresses with
 * and without an IOMMU), enable the controller, make I/O queue pair 1. */
static int nv_up(struct nv *n)
{
	static uint64_t tbl[PROBE_MEM_SIZE / PG];
	if (!n->mem) {
		n->mem = mmap(NULL, PROBE_MEM_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB,
			      -1, 0);
		if (n->mem == MAP_FAILED) {
			n->mem = NULL;
			FAILF("a 2 MiB huge page for the queues: %s (plan: hugepages)", strerror(errno));
			return -1;
		}
		memset(n->mem, 0, PROBE_MEM_SIZE);
	}
	if (!n->mem_mapped) {
		int rc = kmap(n->fd, GPUNVME_KMOD_USER, -1, (uintptr_t)n->mem, PROBE_MEM_SIZE, tbl, &n->mem_handle);
		if (rc) {
			FAILF("map the queue memory: %s", strerror(-rc));
			return -1;
		}
		for (size_t i = 1; i < PROBE_MEM_SIZE / PG; i++)
			if (tbl[i] != tbl[0] + i * PG) {
				FAILF("queue memory not contiguous for the device: entry %zu 0x%" PRIx64, i, tbl[i]);
				return -1;
			}
		n->mem_mapped = 1;
		n->p.iova = tbl[0];
	}
	n->p.name = "kmod_fuzz";
	n->p.bar = n->bar;
	n->p.bar_len = n->bar_len;
	n->p.mem = n->mem;
	quiet(1);
	int rc = probe_enable(&n->p) || probe_identify_and_queues(&n->p);
	quiet(0);
	if (rc) {
		FAILF("controller enable / I/O queues through the module's mappings");
		return -1;
	}
	struct gpunvme_sqe id = { .opc = GPUNVME_ADM_IDENTIFY, .nsid = 1, .prp1 = n->p.iova + PROBE_OFF_ID };
	id.cdw[0] = GPUNVME_CNS_NS;
	if (probe_admin(&n->p, &id, NULL)) {
		FAILF("Identify Namespace 1");
		return -1;
	}
	const struct gpunvme_id_ns *ns = (const struct gpunvme_id_ns *)(n->mem + PROBE_OFF_ID);
	n->p.nsid = 1;
	n->p.nsze = ns->nsze;
	n->p.lba_size = 1u << ns->lbaf[gpunvme_id_ns_flbas_index(ns)].lbads;
	n->ready = 1;
	n->outstanding = 0;
	return 0;
}

/* Controller off (the module's DISABLE: retired mappings go), queue memory
 * unmapped. */
static void nv_down(struct nv *n)
{
	kio(n->fd, GPUNVME_KMOD_DISABLE, NULL);
	if (n->mem_mapped)
		kunmap(n->fd, n->mem_handle);
	n->mem_mapped = 0;
	n->ready = 0;
}

/* Submit one read of `bytes` (<= 16 pages) at disk byte offset `off` into
 * the pages whose bus addresses are tbl[0..]; PRP list in the probe's page.
 * Does not wait. */
static void nv_read_async(struct nv *n, uint64_t off, uint32_t bytes, const uint64_t *tbl, unsigned slot)
{
	struct probe *p = &n->p;
	uint32_t pages = (bytes + PG - 1) / PG;
	struct gpunvme_sqe c = { .opc = GPUNVME_CMD_READ, .nsid = p->nsid, .prp1 = tbl[0] };
	if (pages == 2) {
		c.prp2 = tbl[1];
	} else if (pages > 2) {
		/* one 128-byte slot of PRP entries per outstanding command */
		uint64_t *list = (uint64_t *)(p->mem + PROBE_OFF_PRPL + (slot % 32) * 128);
		for (uint32_t i = 1; i < pages; i++)
			list[i - 1] = tbl[i];
		c.prp2 = p->iova + PROBE_OFF_PRPL + (slot % 32) * 128;
	}
	c.rw.slba = off / p->lba_size;
	c.rw.nlb = (uint16_t)(bytes / p->lba_size - 1);
	struct gpunvme_sqe *sq = (struct gpunvme_sqe *)(p->mem + p->ioq.sq_off);
	c.cid = p->cid++;
	memcpy(&sq[p->ioq.tail], &c, sizeof(c));
	p->ioq.tail = (uint16_t)((p->ioq.tail + 1) % PROBE_QDEPTH);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	probe_wr32(p, gpunvme_sq_doorbell(1, p->dstrd), p->ioq.tail);
	n->outstanding++;
}

/* Wait for one completion (at most ms): its status, or PROBE_TIMEOUT. */
static uint32_t nv_reap(struct nv *n, unsigned ms)
{
	struct probe *p = &n->p;
	volatile struct gpunvme_cqe *cq = (volatile struct gpunvme_cqe *)(p->mem + p->ioq.cq_off);
	uint64_t end = now_ms() + ms;
	while ((cq[p->ioq.head].status & 1) != p->ioq.phase) {
		if (now_ms() > end)
			return PROBE_TIMEOUT;
		sched_yield();
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	uint16_t st = cq[p->ioq.head].status;
	p->ioq.head = (uint16_t)((p->ioq.head + 1) % PROBE_QDEPTH);
	if (p->ioq.head == 0)
		p->ioq.phase ^= 1;
	probe_wr32(p, gpunvme_cq_doorbell(1, p->dstrd), p->ioq.head);
	n->outstanding--;
	return gpunvme_cqe_status(st);
}

/* Write the pattern over the fuzzer's disk region (through the probe's
 * data buffer). */
static int nv_write_pattern(struct nv *n)
{
	for (uint64_t o = 0; o < FZ_DISK_LEN; o += PROBE_DATA_MAX) {
		for (uint32_t i = 0; i < PROBE_DATA_MAX; i++)
			n->mem[PROBE_OFF_DATA + i] = pat_byte(FZ_DISK_OFF + o + i);
		if (probe_rw(&n->p, GPUNVME_CMD_WRITE, FZ_DISK_OFF + o, PROBE_DATA_MAX, 0)) {
			FAILF("write the pattern at disk byte %" PRIu64, FZ_DISK_OFF + o);
			return -1;
		}
	}
	return 0;
}

/* ---- guarded reads: the DMA oracle ------------------------------------- */
#define GUARD_PAGES 4
#define POISON 0xa5

/* An arena of guard + data + guard pages; only the data is mapped. Reads
 * of the pattern into it; then the data must hold the pattern and every
 * guard byte the poison. Returns 0 when it holds. */
struct guarded {
	uint8_t *base;  /* GUARD_PAGES + npages + GUARD_PAGES pages */
	uint32_t npages;
	uint64_t tbl[64];
	uint32_t handle;
};

static int guarded_setup(int fd, struct guarded *g, uint32_t npages)
{
	size_t total = (size_t)(npages + 2 * GUARD_PAGES) * PG;
	g->npages = npages;
	g->base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (g->base == MAP_FAILED)
		return -errno;
	memset(g->base, POISON, total);
	int rc = kmap(fd, GPUNVME_KMOD_USER, -1, (uintptr_t)(g->base + GUARD_PAGES * PG), (uint64_t)npages * PG, g->tbl,
		      &g->handle);
	if (rc)
		munmap(g->base, total);
	return rc;
}

static int guarded_check(struct guarded *g, uint64_t disk_off, const char *what)
{
	size_t total = (size_t)(g->npages + 2 * GUARD_PAGES) * PG;
	size_t bad_guard = 0, bad_data = 0;
	for (size_t i = 0; i < total; i++) {
		size_t d = i - GUARD_PAGES * PG;
		if (i < GUARD_PAGES * PG || i >= (GUARD_PAGES + g->npages) * PG)
			bad_guard += g->base[i] != POISON;
		else
			bad_data += g->base[i] != pat_byte(disk_off + d);
	}
	if (bad_guard || bad_data) {
		FAILF("%s: %zu guard bytes changed, %zu data bytes differ from the pattern", what, bad_guard, bad_data);
		return -1;
	}
	return 0;
}

static void guarded_free(struct guarded *g)
{
	munmap(g->base, (size_t)(g->npages + 2 * GUARD_PAGES) * PG);
	g->base = NULL;
}

static sigjmp_buf g_jmp;
static volatile sig_atomic_t g_sig;
static void on_fault(int sig)
{
	g_sig = sig;
	siglongjmp(g_jmp, 1);
}

/* Read a BAR0 register through a mapping; -1 when the access faults. */
static int64_t bar_read(volatile uint8_t *b, size_t off)
{
	struct sigaction sa = { .sa_handler = on_fault }, o1, o2;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &o1);
	sigaction(SIGBUS, &sa, &o2);
	int64_t v = -1;
	g_sig = 0;
	if (sigsetjmp(g_jmp, 1) == 0)
		v = *(volatile uint32_t *)(b + off);
	sigaction(SIGSEGV, &o1, NULL);
	sigaction(SIGBUS, &o2, NULL);
	return v;
}

/* ---- the fuzzer -------------------------------------------------------- */
struct fz {
	int fd;
	struct rng r;
	int iommu;
	const char *peer;
	int vgem_fd;          /* a dma-buf, or -1 */
	size_t vgem_len;
	uint8_t *vgem_va;     /* its CPU mapping, or NULL */
	uint8_t *arena;       /* ARENA_PAGES of anonymous memory, then PROT_NONE */
	uint8_t *ro;          /* a read-only page */
	uint8_t *none;        /* PROT_NONE pages: unmapped for the kernel's purposes */
	uint64_t *table;      /* TABLE_MAX entries */
	uint64_t *ro_table;   /* a read-only table */
	uint8_t *argpage;     /* a MAP argument made read-only */
	volatile uint8_t *bar;
	size_t bar_len;
	uint32_t handles[256];
	unsigned nhandles;
	uint64_t maps_ok;
	uint64_t reads;
	struct nv nv;
};

#define ARENA_PAGES 256u
#define TABLE_MAX 4096u

static uint64_t interesting_u64(struct rng *r)
{
	static const uint64_t v[] = { 0, 1, 4095, 4096, 4097, 8192, 1ull << 20, (1ull << 31) - 4096, 1ull << 32,
				      (1ull << 36), 1ull << 47, (1ull << 47) - 4096, 1ull << 63, ~0ull, ~0ull - 4095,
				      ~0ull - 4096 * 2 + 1, 0xffff888000000000ull, 0xffffffff81000000ull,
				      0x7ffffffff000ull };
	if (chance(r, 20))
		return rnd(r);
	if (chance(r, 20))
		return rnd(r) & ~4095ull;
	return v[rndn(r, sizeof(v) / sizeof(v[0]))];
}

static uint64_t pick_addr(struct fz *f)
{
	switch (rndn(&f->r, 9)) {
	case 0:
	case 1:
	case 2:
		return (uintptr_t)f->arena + rndn(&f->r, ARENA_PAGES) * PG;
	case 3:
		return (uintptr_t)f->arena + rndn(&f->r, ARENA_PAGES * PG); /* unaligned mostly */
	case 4:
		return (uintptr_t)f->ro;
	case 5:
		return (uintptr_t)f->none;
	case 6:
		return f->bar ? (uintptr_t)f->bar : 0; /* VM_PFNMAP: not pinnable */
	case 7:
		return (uintptr_t)f->table; /* the table itself */
	default:
		return interesting_u64(&f->r);
	}
}

static uint64_t pick_len(struct fz *f)
{
	switch (rndn(&f->r, 6)) {
	case 0:
	case 1:
		return (1 + rndn(&f->r, 16)) * PG;
	case 2:
		return (1 + rndn(&f->r, ARENA_PAGES + 8)) * PG;
	default:
		return interesting_u64(&f->r);
	}
}

static uint64_t pick_table(struct fz *f)
{
	switch (rndn(&f->r, 8)) {
	case 0:
		return 0;
	case 1:
		return (uintptr_t)f->ro_table;
	case 2:
		return (uintptr_t)f->none;
	case 3:
		/* the last entries run into the PROT_NONE page after the table */
		return (uintptr_t)(f->table + TABLE_MAX - rndn(&f->r, 8));
	case 4:
		return interesting_u64(&f->r);
	case 5:
		return (uintptr_t)f->table + 1 + rndn(&f->r, 7); /* misaligned */
	default:
		return (uintptr_t)f->table;
	}
}

static int pick_fd(struct fz *f)
{
	switch (rndn(&f->r, 7)) {
	case 0:
		return -1;
	case 1:
		return f->fd; /* the device itself: no dma-buf */
	case 2:
		return (int)rnd(&f->r);
	case 3:
		return 0;
	case 4:
		return 1000; /* closed */
	default:
		return f->vgem_fd;
	}
}

static void pick_peer(struct fz *f, char peer[16])
{
	static const char *const names[] = { "0000:00:10.0", "0000:00:04.0", "0000:00:1f.7", "ffff:ff:1f.7",
					     "nonsense",     "%n%n%s%x",     "0:0:0.0",      "0000:00:10.8",
					     "",             "00000000000000000" };
	memset(peer, 0, 16);
	if (chance(&f->r, 25)) {
		for (int i = 0; i < 16; i++)
			peer[i] = (char)rnd(&f->r); /* unterminated, any bytes */
	} else if (chance(&f->r, 30) && f->peer) {
		memcpy(peer, f->peer, strlen(f->peer) < 16 ? strlen(f->peer) : 16);
	} else {
		const char *s = names[rndn(&f->r, sizeof(names) / sizeof(names[0]))];
		memcpy(peer, s, strlen(s) < 16 ? strlen(s) : 16); /* 16 bytes: no NUL */
	}
}

static void track(struct fz *f, uint32_t h)
{
	if (f->nhandles < sizeof(f->handles) / sizeof(f->handles[0]))
		f->handles[f->nhandles++] = h;
	else
		kunmap(f->fd, h);
}

/* noiommu: the table must be the pages' physical addresses */
static void check_table_user(struct fz *f, uint64_t addr, uint64_t len, const uint8_t *table)
{
	for (uint64_t i = 0; i < len / PG; i++) {
		uint64_t tbl[1];
		memcpy(tbl, table + i * 8, 8); /* the table may be misaligned */
		if (tbl[0] & (PG - 1) || !tbl[0]) {
			FAILF("map of 0x%" PRIx64 "+%" PRIu64 ": entry %" PRIu64 " 0x%" PRIx64 " not a page", addr, len, i,
			      tbl[0]);
			return;
		}
		if (!f->iommu) {
			uint64_t phys = probe_virt_to_phys((const void *)(uintptr_t)(addr + i * PG));
			if (phys && phys != tbl[0]) {
				FAILF("map of 0x%" PRIx64 ": entry %" PRIu64 " 0x%" PRIx64 " but the page is at 0x%" PRIx64,
				      addr, i, tbl[0], phys);
				return;
			}
		}
	}
}

/* One MAP with fields drawn from valid and hostile values. */
static void op_map(struct fz *f)
{
	struct gpunvme_kmod_map m;
	memset(&m, 0, sizeof(m));
	static const uint32_t kinds[] = { 0, 1, 1, 1, 2, 2, 3, 4, 5, 0x80000001u, ~0u };
	m.kind = kinds[rndn(&f->r, sizeof(kinds) / sizeof(kinds[0]))];
	m.fd = pick_fd(f);
	m.addr = pick_addr(f);
	m.len = pick_len(f);
	m.table = pick_table(f);
	switch (rndn(&f->r, 5)) {
	case 0:
		m.table_entries = interesting_u64(&f->r);
		break;
	case 1:
		m.table_entries = m.len / PG ? m.len / PG - 1 : 0;
		break;
	default:
		m.table_entries = m.len / PG;
		break;
	}
	if (m.kind == GPUNVME_KMOD_DMABUF && chance(&f->r, 60)) {
		m.addr = rndn(&f->r, 4) ? rndn(&f->r, f->vgem_len / PG + 2) * PG : interesting_u64(&f->r);
		m.len = (1 + rndn(&f->r, f->vgem_len / PG + 1)) * PG;
		m.table_entries = m.len / PG;
	}
	if (m.kind == GPUNVME_KMOD_PEER) {
		pick_peer(f, m.peer);
		m.bar = chance(&f->r, 60) ? 2 : (uint32_t)(chance(&f->r, 50) ? rndn(&f->r, 8) : rnd(&f->r));
		if (chance(&f->r, 50))
			m.addr = rndn(&f->r, 1100) * PG;
	} else if (chance(&f->r, 20)) {
		pick_peer(f, m.peer);
		m.bar = (uint32_t)rnd(&f->r);
	}
	if (chance(&f->r, 10))
		m.handle = (uint32_t)rnd(&f->r); /* an out field set on input */
	int table_bad = m.table == 0 || m.table == (uintptr_t)f->ro_table || m.table == (uintptr_t)f->none;
	struct gpunvme_kmod_map in = m;
	void *arg = &m;
	if (chance(&f->r, 3))
		arg = chance(&f->r, 50) ? (void *)f->ro : (void *)f->none;
	if (chance(&f->r, 3)) {
		/* a valid request in a page made read-only: the handle cannot be
		 * returned, so nothing may stay mapped */
		struct gpunvme_kmod_map *v = (struct gpunvme_kmod_map *)f->argpage;
		mprotect(f->argpage, PG, PROT_READ | PROT_WRITE);
		*v = (struct gpunvme_kmod_map){ .kind = GPUNVME_KMOD_USER, .addr = (uintptr_t)f->arena, .len = 2 * PG };
		v->table = (uintptr_t)f->table;
		v->table_entries = 2;
		mprotect(f->argpage, PG, PROT_READ);
		int64_t p0 = kpinned(f->fd);
		if (kio(f->fd, GPUNVME_KMOD_MAP, v) == 0 || errno != EFAULT)
			FAILF("MAP with its argument read-only: rc/errno %d, want EFAULT", errno);
		int64_t p1 = kpinned(f->fd);
		/* released at once when the controller is stopped; retired (and
		 * counted until it stops: the end-of-run check) when it runs */
		int stopped = f->bar && !(bar_read(f->bar, 0x14) & 1) && !(bar_read(f->bar, 0x1c) & 1);
		if (stopped && p1 != p0)
			FAILF("MAP that failed with EFAULT (read-only argument) left %" PRId64 " bytes pinned", p1 - p0);
		return;
	}
	long rc = kio(f->fd, GPUNVME_KMOD_MAP, arg);
	int e = rc ? errno : 0;
	if (arg != &m) {
		if (!rc)
			FAILF("MAP with its argument in %s memory succeeded", arg == f->ro ? "read-only" : "no");
		return;
	}
	if (rc) {
		switch (e) {
		case EINVAL: case EFAULT: case ENOSPC: case ENOMEM: case ERANGE: case EBADF: case ENODEV:
		case ENOENT: case EPERM: case ENXIO: case EHOSTDOWN: case EIO: case EOPNOTSUPP: case EINTR:
			break;
		default:
			FAILF("MAP kind %u addr 0x%" PRIx64 " len 0x%" PRIx64 ": unexpected errno %d (%s)", in.kind, (uint64_t)in.addr,
			      (uint64_t)in.len, e, strerror(e));
		}
		if (e == ENOSPC && m.table_entries != in.len / PG)
			FAILF("ENOSPC says %" PRIu64 " entries needed for %" PRIu64 " bytes", (uint64_t)m.table_entries, (uint64_t)in.len);
		return;
	}
	/* success: the request must have been valid */
	f->maps_ok++;
	if (!in.len || in.len % PG || in.kind < 1 || in.kind > 4 || in.table_entries < in.len / PG || table_bad)
		FAILF("MAP kind %u addr 0x%" PRIx64 " len 0x%" PRIx64 " table 0x%" PRIx64 "[%" PRIu64
		      "] succeeded (handle %u)",
		      in.kind, (uint64_t)in.addr, (uint64_t)in.len, (uint64_t)in.table, (uint64_t)in.table_entries, m.handle);
	if (in.kind == GPUNVME_KMOD_USER) {
		uint64_t a0 = (uintptr_t)f->arena, a1 = a0 + (uint64_t)ARENA_PAGES * PG;
		uint64_t t0 = (uintptr_t)f->table, t1 = t0 + TABLE_MAX * 8;
		int in_arena = in.addr >= a0 && in.addr + in.len <= a1;
		int in_table = in.addr >= t0 && in.addr + in.len <= t1;
		if (in.addr % PG || !(in_arena || in_table))
			FAILF("USER map of 0x%" PRIx64 "+0x%" PRIx64 " outside the writable arena succeeded", (uint64_t)in.addr,
			      (uint64_t)in.len);
		else if (in.table >= (uintptr_t)f->table && in.table + in.len / PG * 8 <= (uintptr_t)(f->table + TABLE_MAX))
			check_table_user(f, in.addr, in.len, (const uint8_t *)(uintptr_t)in.table);
	}
	if (in.kind == GPUNVME_KMOD_DMABUF && (in.addr % PG || in.addr + in.len > f->vgem_len))
		FAILF("DMABUF map of offset 0x%" PRIx64 "+0x%" PRIx64 " beyond the %zu-byte buffer succeeded", (uint64_t)in.addr,
		      (uint64_t)in.len, f->vgem_len);
	if (m.handle == 0)
		FAILF("MAP succeeded with handle 0");
	if (m.handle > atomic_load(&g_maxh))
		atomic_store(&g_maxh, m.handle);
	track(f, m.handle);
}

static void op_unmap(struct fz *f)
{
	uint32_t h;
	int tracked = f->nhandles && chance(&f->r, 70);
	unsigned idx = 0;
	if (tracked) {
		idx = (unsigned)rndn(&f->r, f->nhandles);
		h = f->handles[idx];
	} else {
		static const uint32_t v[] = { 0, 1, 2, 0x7fffffff, 0x80000000u, ~0u };
		h = chance(&f->r, 50) ? v[rndn(&f->r, 6)] : (uint32_t)rnd(&f->r);
		for (unsigned i = 0; i < f->nhandles; i++)
			if (f->handles[i] == h)
				return; /* would be a tracked one */
		if (f->nv.mem_mapped && h == f->nv.mem_handle)
			return; /* the queues' memory: the controller is using it */
	}
	if (chance(&f->r, 3)) {
		if (kio(f->fd, GPUNVME_KMOD_UNMAP, chance(&f->r, 50) ? NULL : (void *)f->none) == 0)
			FAILF("UNMAP with a bad argument pointer succeeded");
		return;
	}
	int rc = kunmap(f->fd, h);
	if (tracked) {
		if (rc)
			FAILF("UNMAP of live handle %u: %s", h, strerror(-rc));
		f->handles[idx] = f->handles[--f->nhandles];
		if (chance(&f->r, 30) && kunmap(f->fd, h) != -ENOENT)
			FAILF("a second UNMAP of handle %u did not say ENOENT", h);
	} else if (rc != -ENOENT) {
		FAILF("UNMAP of unknown handle %u: rc %d", h, rc);
	}
}

/* Unknown numbers, known numbers with other sizes and directions. */
static void op_badioctl(struct fz *f)
{
	static uint8_t buf[8192] __attribute__((aligned(4096)));
	unsigned dir = (unsigned)rndn(&f->r, 4);
	unsigned size = chance(&f->r, 50) ? (unsigned)rndn(&f->r, 0x3fff) : (unsigned)rndn(&f->r, 200);
	unsigned nr = chance(&f->r, 60) ? 0xc0 + (unsigned)rndn(&f->r, 8) : (unsigned)rndn(&f->r, 256);
	/* Types the VFS answers itself ('X': FIFREEZE freezes the file's
	 * filesystem, here devtmpfs; 'f', 'T', 0x94, 0, 0x15: file and tty
	 * ioctls) are left out: they never reach the module. */
	unsigned type = chance(&f->r, 80) ? GPUNVME_KMOD_IOC : (unsigned)rndn(&f->r, 256);
	if (type == 'X' || type == 'f' || type == 'T' || type == 0x94 || type == 0 || type == 0x15)
		type = GPUNVME_KMOD_IOC;
	unsigned long cmd = _IOC(dir, type, nr, size);
	int known = cmd == GPUNVME_KMOD_INFO || cmd == GPUNVME_KMOD_MAP || cmd == GPUNVME_KMOD_UNMAP ||
		    cmd == GPUNVME_KMOD_DISABLE;
	if (known)
		return;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rnd(&f->r);
	void *arg = chance(&f->r, 20) ? (void *)(uintptr_t)interesting_u64(&f->r) : (void *)buf;
	long rc = kio(f->fd, cmd, arg);
	if (rc == 0 || errno != ENOTTY)
		FAILF("ioctl 0x%lx (dir %u type 0x%x nr 0x%x size %u): rc %ld errno %d, want ENOTTY", cmd, dir, type, nr,
		      size, rc, errno);
}

static void op_info(struct fz *f)
{
	struct gpunvme_kmod_info in;
	void *arg = &in;
	int bad = chance(&f->r, 30);
	if (bad)
		arg = chance(&f->r, 50) ? (void *)f->ro : (void *)(uintptr_t)interesting_u64(&f->r);
	long rc = kio(f->fd, GPUNVME_KMOD_INFO, arg);
	if (bad && rc == 0 && (arg == (void *)f->ro || arg == NULL))
		FAILF("INFO into %p succeeded", arg);
	if (!bad && rc)
		FAILF("INFO: %s", strerror(errno));
	if (!bad && !rc && (in.version != GPUNVME_KMOD_VERSION || in.bar0_len < 0x2000 || in.pad))
		FAILF("INFO: version %u bar0_len %llu pad %u", in.version, (unsigned long long)in.bar0_len, in.pad);
}

/* mmap of BAR0 with hostile offsets, sizes and flags; mremap, mprotect,
 * madvise; partial munmap. */
static void op_mmap(struct fz *f)
{
	size_t bl = f->bar_len;
	static const off_t offs[] = { 4096, 8192, 1 << 20, (off_t)1 << 40, -4096 };
	size_t len = chance(&f->r, 50) ? bl : (size_t)(1 + rndn(&f->r, bl / PG + 4)) * PG;
	off_t off = chance(&f->r, 60) ? 0 : offs[rndn(&f->r, 5)];
	int flags = chance(&f->r, 80) ? MAP_SHARED : MAP_PRIVATE;
	int prot = chance(&f->r, 80) ? PROT_READ | PROT_WRITE : PROT_READ | PROT_EXEC;
	void *p = mmap(NULL, len, prot, flags, f->fd, off);
	int want_ok = off == 0 && len <= ((bl + PG - 1) & ~(size_t)(PG - 1)) && flags == MAP_SHARED;
	if (p == MAP_FAILED) {
		if (want_ok && prot == (PROT_READ | PROT_WRITE))
			FAILF("mmap of BAR0 (%zu bytes at 0) refused: %s", len, strerror(errno));
		return;
	}
	if (!want_ok)
		FAILF("mmap len %zu off 0x%llx flags 0x%x succeeded (BAR0 %zu bytes)", len, (long long)off, flags, bl);
	int64_t v = bar_read(p, 0x08); /* VS */
	if (v <= 0 || v == 0xffffffff)
		FAILF("VS through a fresh BAR0 mapping: 0x%llx", (long long)v);
	switch (rndn(&f->r, 6)) {
	case 0: {
		void *q = mremap(p, len, len + PG, MREMAP_MAYMOVE); /* VM_DONTEXPAND */
		if (q != MAP_FAILED) {
			FAILF("mremap grew the BAR0 mapping");
			p = q;
			len += PG;
		}
		break;
	}
	case 1:
		if (madvise(p, len, MADV_DOFORK) == 0)
			FAILF("MADV_DOFORK on the BAR0 mapping accepted (a child would keep the registers)");
		break;
	case 2:
		if (len > PG) {
			munmap((uint8_t *)p + PG, PG); /* a hole */
			if (bar_read(p, 0x08) < 0)
				FAILF("the BAR0 mapping's first page lost after a partial munmap");
		}
		break;
	case 3: {
		if (len > 8 * PG)
			break; /* f->none has 8 PROT_NONE pages to spare */
		void *q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (uint8_t *)f->none);
		if (q != MAP_FAILED) {
			if (bar_read(q, 0x08) != v)
				FAILF("moved BAR0 mapping reads VS 0x%llx", (long long)bar_read(q, 0x08));
			p = q;
			/* f->none is now BAR0: put the PROT_NONE page back after */
			munmap(p, len);
			void *n = mmap(f->none, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			if (n != f->none)
				FAILF("restore the PROT_NONE pages");
			return;
		}
		break;
	}
	default:
		break;
	}
	munmap(p, len);
}

/* fork with the BAR mapped and maps held: the child has no BAR mapping
 * (VM_DONTCOPY), may use the inherited file; its own map dies with it or
 * stays on the file, either way released by the file's release. */
static void op_fork(struct fz *f, int do_exec)
{
	int pfd[2];
	if (pipe(pfd))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		int code = 0;
		if (f->bar && bar_read(f->bar, 0x08) != -1)
			code |= 1; /* the registers came along */
		if (do_exec) {
			/* the inherited fd survives exec (dup without CLOEXEC) */
			int fd = dup(f->fd);
			char a1[16];
			snprintf(a1, sizeof(a1), "%d", fd);
			execl("/proc/self/exe", "kmod_fuzz", "exec-child", a1, (char *)NULL);
			_exit(100);
		}
		static uint8_t mine[8 * 4096] __attribute__((aligned(4096)));
		memset(mine, 1, sizeof(mine));
		static uint64_t tbl[8];
		uint32_t h = 0;
		if (kmap(f->fd, GPUNVME_KMOD_USER, -1, (uintptr_t)mine, sizeof(mine), tbl, &h))
			code |= 2;
		if (write(pfd[1], &h, sizeof(h)) != sizeof(h))
			code |= 4;
		_exit(code);
	}
	close(pfd[1]);
	uint32_t h = 0;
	if (pid > 0 && !do_exec && read(pfd[0], &h, sizeof(h)) == sizeof(h) && h)
		track(f, h); /* the child's map stays on the shared file */
	close(pfd[0]);
	int st = 0;
	if (pid > 0)
		waitpid(pid, &st, 0);
	if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		FAILF("%s child: status 0x%x (1: BAR0 mapped in the child, 2: map failed, 100: exec failed)",
		      do_exec ? "exec" : "fork", st);
}

/* The exec'd child: INFO and a BAR0 mapping through the inherited file. */
static int exec_child(int fd)
{
	struct gpunvme_kmod_info in;
	if (kinfo(fd, &in))
		return 3;
	void *p = mmap(NULL, in.bar0_len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return 4;
	int64_t v = bar_read(p, 0x08);
	munmap(p, in.bar0_len);
	return v > 0 ? 0 : 5;
}

/* ---- threads: one owner, several threads on the same memory ------------ */
/* The threads' handles, shared so that they unmap each other's (two may
 * unmap the same one: one gets ENOENT). The main thread's handles and the
 * queue memory are never in it. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t pool[512];
static unsigned npool;

struct thr {
	struct fz *f;
	uint64_t seed;
	uint64_t until;
	uint64_t ops;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	struct fz *f = t->f;
	struct rng r = { t->seed | 1 };
	uint64_t tbl[16];
	int fd = dup(f->fd); /* closed mid-way: a dup, so the others keep theirs */
	while (now_ms() < t->until) {
		t->ops++;
		switch (rndn(&r, 8)) {
		case 0:
		case 1: {
			/* everybody maps the same first pages of the arena */
			uint32_t pages = 1 + (uint32_t)rndn(&r, 16);
			uint32_t h = 0; /* kmap sets it on success; gcc -O3 cannot see that */
			int rc = kmap(fd, GPUNVME_KMOD_USER, -1, (uintptr_t)f->arena + rndn(&r, 4) * PG, (uint64_t)pages * PG,
				      tbl, &h);
			if (rc == 0) {
				int kept = 0;
				pthread_mutex_lock(&pool_lock);
				if (npool < 512) {
					pool[npool++] = h;
					kept = 1;
				}
				pthread_mutex_unlock(&pool_lock);
				if (!kept)
					kunmap(fd, h);
			} else if (rc != -ENOMEM && rc != -EFAULT && rc != -EBADF) {
				FAILF("thread map: %s", strerror(-rc));
			}
			break;
		}
		case 2:
		case 3: {
			uint32_t h = 0;
			pthread_mutex_lock(&pool_lock);
			if (npool)
				h = pool[rndn(&r, npool)];
			pthread_mutex_unlock(&pool_lock);
			if (!h)
				break;
			/* not taken out first: another thread may unmap it too */
			int rc = kunmap(fd, h);
			if (rc && rc != -ENOENT && rc != -EBADF)
				FAILF("thread unmap: %s", strerror(-rc));
			if (rc == -EBADF)
				break; /* this thread closed its fd: the handle stays for the others */
			pthread_mutex_lock(&pool_lock);
			for (unsigned i = 0; i < npool; i++)
				if (pool[i] == h) {
					pool[i] = pool[--npool];
					break;
				}
			pthread_mutex_unlock(&pool_lock);
			break;
		}
		case 4: {
			struct gpunvme_kmod_info in;
			kinfo(fd, &in);
			break;
		}
		case 5:
			if (chance(&r, 20))
				kio(fd, GPUNVME_KMOD_DISABLE, NULL);
			break;
		case 6: {
			void *p = mmap(NULL, f->bar_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (p != MAP_FAILED)
				munmap(p, f->bar_len);
			break;
		}
		default:
			/* replace arena pages under the others' pins */
			if (chance(&r, 30)) {
				void *p = mmap(f->arena + 8 * PG, 8 * PG, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
				if (p == MAP_FAILED)
					FAILF("remap arena pages: %s", strerror(errno));
			}
			break;
		}
		if (chance(&r, 1) && fd >= 0) {
			close(fd);
			fd = -1; /* EBADF from here on */
		}
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void op_threads(struct fz *f, unsigned nthreads, unsigned ms)
{
	pthread_t th[16];
	struct thr t[16];
	if (nthreads > 16)
		nthreads = 16;
	uint64_t until = now_ms() + ms;
	for (unsigned i = 0; i < nthreads; i++) {
		t[i] = (struct thr){ .f = f, .seed = rnd(&f->r), .until = until };
		if (pthread_create(&th[i], NULL, thr_main, &t[i]))
			nthreads = i;
	}
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	unsigned gone = 0;
	for (unsigned i = 0; i < npool; i++) {
		int rc = kunmap(f->fd, pool[i]);
		if (rc && rc != -ENOENT)
			FAILF("unmap a thread's handle %u: %s", pool[i], strerror(-rc));
		gone += rc == -ENOENT;
	}
	if (getenv("KMOD_FUZZ_DEBUG"))
		printf("kmod_fuzz: threads: %u handles in the pool, %u already gone, max handle %u\n", npool, gone,
		       atomic_load(&g_maxh));
	npool = 0;
	f->nv.ready = 0; /* a thread may have disabled the controller */
}

/* ---- real reads into guarded memory ------------------------------------ */
static void op_reads(struct fz *f)
{
	struct nv *n = &f->nv;
	if (!n->ready && nv_up(n))
		return;
	struct guarded g;
	uint32_t npages = 1 + (uint32_t)rndn(&f->r, 16);
	int rc = guarded_setup(f->fd, &g, npages);
	if (rc) {
		FAILF("guarded buffer of %u pages: %s", npages, strerror(-rc));
		return;
	}
	/* noiommu: the table is the pinned pages' physical addresses */
	check_table_user(f, (uintptr_t)(g.base + GUARD_PAGES * PG), (uint64_t)npages * PG, (const uint8_t *)g.tbl);
	uint64_t off = FZ_DISK_OFF + rndn(&f->r, (FZ_DISK_LEN - npages * PG) / PG) * PG;
	/* the whole buffer in one command, or a page per command */
	int per_page = chance(&f->r, 50);
	if (per_page)
		for (uint32_t i = 0; i < npages; i++)
			nv_read_async(n, off + (uint64_t)i * PG, PG, &g.tbl[i], i);
	else
		nv_read_async(n, off, npages * PG, g.tbl, 0);
	/* sometimes unmap before the completions: the module must keep the
	 * pages (retired) while the controller runs */
	int early = chance(&f->r, 30);
	int64_t before = early ? kpinned(f->fd) : 0;
	if (early) {
		if (kunmap(f->fd, g.handle))
			FAILF("UNMAP with reads in flight");
		int64_t after = kpinned(f->fd);
		if (after != before)
			FAILF("UNMAP with reads in flight: pinned %" PRId64 " -> %" PRId64 " (must stay until the controller stops)",
			      before, after);
	}
	unsigned cmds = per_page ? npages : 1;
	for (unsigned i = 0; i < cmds; i++) {
		uint32_t st = nv_reap(n, 10000);
		if (st) {
			FAILF("read into the guarded buffer: %s", probe_status_str(st));
			printf("kmod_fuzz: CC 0x%x CSTS 0x%x, %u outstanding, CQ head %u phase %u status 0x%x, command %u of %u\n",
			       (unsigned)bar_read(f->bar, 0x14), (unsigned)bar_read(f->bar, 0x1c), n->outstanding,
			       n->p.ioq.head, n->p.ioq.phase,
			       ((volatile struct gpunvme_cqe *)(n->p.mem + n->p.ioq.cq_off))[n->p.ioq.head].status, i, cmds);
			n->ready = 0;
			break;
		}
	}
	f->reads += cmds;
	if (guarded_check(&g, off, "guarded read") && !f->iommu) {
		/* where are the pages now, and did the queue memory move? */
		check_table_user(f, (uintptr_t)(g.base + GUARD_PAGES * PG), (uint64_t)npages * PG, (const uint8_t *)g.tbl);
		uint64_t q = probe_virt_to_phys(n->mem);
		printf("kmod_fuzz: guarded read failed: buffer page 0 at 0x%" PRIx64 " (table 0x%" PRIx64
		       "), queue memory at 0x%" PRIx64 " (iova 0x%" PRIx64 "), %s\n",
		       probe_virt_to_phys(g.base + GUARD_PAGES * PG), g.tbl[0], q, n->p.iova,
		       per_page ? "a page per command" : "one command");
	}
	if (!early)
		kunmap(f->fd, g.handle);
	guarded_free(&g);
}

static void vgem_sync(struct fz *f, uint64_t flags)
{
	struct dma_buf_sync sy = { .flags = flags | DMA_BUF_SYNC_RW };
	ioctl(f->vgem_fd, DMA_BUF_IOCTL_SYNC, &sy);
}

/* Reads into a window of the vgem dma-buf mapped at a page offset: the
 * window's pages get the data, every other page of the buffer keeps its
 * poison (the module's offset into the exporter's scatterlist is exact). */
static void op_reads_dmabuf(struct fz *f)
{
	struct nv *n = &f->nv;
	if (!f->vgem_va || (!n->ready && nv_up(n)))
		return;
	uint32_t pages = (uint32_t)(f->vgem_len / PG);
	uint32_t off = (uint32_t)rndn(&f->r, pages);
	uint32_t len = 1 + (uint32_t)rndn(&f->r, pages - off < 16 ? pages - off : 16);
	uint64_t tbl[16];
	uint32_t h = 0; /* as above: set by kmap on success */
	vgem_sync(f, DMA_BUF_SYNC_START);
	memset(f->vgem_va, POISON, f->vgem_len);
	vgem_sync(f, DMA_BUF_SYNC_END);
	int rc = kmap(f->fd, GPUNVME_KMOD_DMABUF, f->vgem_fd, (uint64_t)off * PG, (uint64_t)len * PG, tbl, &h);
	if (rc) {
		FAILF("DMABUF map of pages %u+%u of the vgem buffer: %s", off, len, strerror(-rc));
		return;
	}
	uint64_t disk = FZ_DISK_OFF + rndn(&f->r, (FZ_DISK_LEN - len * PG) / PG) * PG;
	for (uint32_t i = 0; i < len; i++)
		nv_read_async(n, disk + (uint64_t)i * PG, PG, &tbl[i], i);
	for (uint32_t i = 0; i < len; i++) {
		uint32_t st = nv_reap(n, 10000);
		if (st) {
			FAILF("read into the vgem window: %s", probe_status_str(st));
			n->ready = 0;
			break;
		}
	}
	f->reads += len;
	kunmap(f->fd, h);
	vgem_sync(f, DMA_BUF_SYNC_START);
	size_t bad_out = 0, bad_in = 0;
	for (size_t i = 0; i < f->vgem_len; i++) {
		size_t pg = i / PG;
		if (pg >= off && pg < off + len)
			bad_in += f->vgem_va[i] != pat_byte(disk + i - (size_t)off * PG);
		else
			bad_out += f->vgem_va[i] != POISON;
	}
	vgem_sync(f, DMA_BUF_SYNC_END);
	if (bad_in || bad_out)
		FAILF("vgem window pages %u+%u: %zu bytes outside changed, %zu inside differ from the pattern", off, len,
		      bad_out, bad_in);
}

/* Close with mappings held (and BAR0 mapped): the release drops them all;
 * pinned and VmLck back to the start. */
static void op_close_reopen(struct fz *f, long vmlck0)
{
	if (f->nv.ready || f->nv.mem_mapped)
		f->nv.mem_mapped = 0, f->nv.ready = 0;
	int had_bar = f->bar != NULL;
	close(f->fd);
	/* the BAR0 mapping holds the file: still owned */
	int fd2 = dev_open();
	if (had_bar && fd2 >= 0)
		FAILF("open succeeded while the closed file's BAR0 mapping held it");
	if (fd2 >= 0)
		close(fd2);
	if (f->bar)
		munmap((void *)f->bar, f->bar_len);
	f->bar = NULL;
	f->nv.bar = NULL;
	f->nhandles = 0;
	f->fd = dev_open();
	if (f->fd < 0) {
		FAILF("reopen after close: %s", strerror(errno));
		return;
	}
	int64_t p = kpinned(f->fd);
	long l = vmlck_kb(getpid());
	if (p != 0 || l != vmlck0)
		FAILF("after close with mappings held: module pinned %" PRId64 " bytes, VmLck %ld kB (start %ld)", p, l,
		      vmlck0);
	f->nv.fd = f->fd;
	if (nv_map_bar(&f->nv) == 0) {
		f->bar = f->nv.bar;
		f->bar_len = f->nv.bar_len;
	}
}

/* a vgem dumb buffer as a dma-buf (drm_uapi.h) */

static int vgem_dmabuf(size_t len)
{
	char path[32], name[32];
	for (int i = 0; i < 8; i++) {
		snprintf(path, sizeof(path), "/dev/dri/card%d", i);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct t_drm_version v = { .name_len = sizeof(name) - 1, .name = name };
		memset(name, 0, sizeof(name));
		if (ioctl(fd, T_DRM_IOCTL_VERSION, &v) || strcmp(name, "vgem")) {
			close(fd);
			continue;
		}
		struct t_drm_create_dumb cd = { .height = (uint32_t)(len / 4096), .width = 1024, .bpp = 32 };
		struct t_drm_prime_handle ph = { .flags = O_CLOEXEC | O_RDWR, .fd = -1 };
		if (ioctl(fd, T_DRM_IOCTL_MODE_CREATE_DUMB, &cd) == 0) {
			ph.handle = cd.handle;
			ioctl(fd, T_DRM_IOCTL_PRIME_HANDLE_TO_FD, &ph);
		}
		close(fd);
		return ph.fd;
	}
	return -1;
}

static int fz_setup(struct fz *f)
{
	/* arena, then PROT_NONE: a long USER map runs into the hole and fails */
	size_t span = (ARENA_PAGES + 64) * PG;
	uint8_t *a = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a == MAP_FAILED)
		return -1;
	if (mprotect(a, ARENA_PAGES * PG, PROT_READ | PROT_WRITE))
		return -1;
	f->arena = a;
	memset(f->arena, 0x11, ARENA_PAGES * PG);
	f->none = a + (ARENA_PAGES + 8) * PG;
	f->ro = mmap(NULL, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	size_t tb = (TABLE_MAX * 8 + PG - 1) & ~(size_t)(PG - 1);
	uint8_t *t = mmap(NULL, tb + PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (f->ro == MAP_FAILED || t == MAP_FAILED || mprotect(t, tb, PROT_READ | PROT_WRITE))
		return -1;
	f->table = (uint64_t *)t;
	f->ro_table = mmap(NULL, tb, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (f->ro_table == MAP_FAILED)
		return -1;
	f->argpage = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (f->argpage == MAP_FAILED)
		return -1;
	f->vgem_len = 64 * PG;
	f->vgem_fd = vgem_dmabuf(f->vgem_len);
	if (f->vgem_fd >= 0) {
		void *v = mmap(NULL, f->vgem_len, PROT_READ | PROT_WRITE, MAP_SHARED, f->vgem_fd, 0);
		f->vgem_va = v == MAP_FAILED ? NULL : v;
	}
	return 0;
}

static int cmd_fuzz(unsigned seconds, uint64_t seed, unsigned nthreads, const char *peer)
{
	struct fz f;
	memset(&f, 0, sizeof(f));
	f.r.s = seed ? seed : 1;
	f.peer = peer;
	g_verbose = 0;
	if (fz_setup(&f)) {
		FAILF("fuzzer memory set-up: %s", strerror(errno));
		return 1;
	}
	printf("kmod_fuzz: seed %" PRIu64 ", %u s, %u threads, device %s, vgem dma-buf %s\n", seed, seconds, nthreads,
	       g_dev, f.vgem_fd >= 0 ? "yes" : "no (DMABUF maps fail)");
	long vmlck0 = vmlck_kb(getpid());
	f.fd = dev_open();
	if (f.fd < 0) {
		FAILF("open %s: %s", g_dev, strerror(errno));
		return 1;
	}
	struct gpunvme_kmod_info in;
	if (kinfo(f.fd, &in)) {
		FAILF("INFO");
		return 1;
	}
	int64_t pinned0 = (int64_t)in.pinned;
	f.iommu = (int)in.iommu;
	printf("kmod_fuzz: module: IOMMU %s, BAR0 %llu bytes, max_map %llu, pin_limit %llu, pinned %llu, VmLck %ld kB\n",
	       in.iommu ? "translating" : "off", (unsigned long long)in.bar0_len, (unsigned long long)in.max_map,
	       (unsigned long long)in.pin_limit, (unsigned long long)in.pinned, vmlck0);
	/* USER ranges that wrap or leave the user address space: EFAULT
	 * from the module itself, before any pin, on every kernel (6.12's
	 * GUP alone says EOVERFLOW for a wrapping range) */
	static const uint64_t wrap[][2] = {
		{ 0xfffffffffffff000ull, 0x1000 }, { 0xfffffffffffff000ull, 0x3000 },
		{ 0xffffffffffffe000ull, 0x2000 }, { 0xffff800000000000ull, 0x1000 },
		{ 0x00007ffffffff000ull, 0x2000 }, { 0x1000, 0xfffffffffffff000ull },
	};
	for (size_t i = 0; i < sizeof(wrap) / sizeof(wrap[0]); i++) {
		uint32_t h;
		int rc = kmap(f.fd, GPUNVME_KMOD_USER, -1, wrap[i][0], wrap[i][1], f.table, &h);
		/* len past max_map (the last) is EINVAL before the range is looked at */
		int want = wrap[i][1] > in.max_map ? -EINVAL : -EFAULT;
		if (rc != want)
			FAILF("USER map of 0x%" PRIx64 "+0x%" PRIx64 ": %d, want %d", wrap[i][0], wrap[i][1], rc, want);
	}
	f.nv.fd = f.fd;
	if (nv_map_bar(&f.nv)) {
		FAILF("mmap BAR0: %s", strerror(errno));
		return 1;
	}
	f.bar = f.nv.bar;
	f.bar_len = f.nv.bar_len;
	if (nv_up(&f.nv) || nv_write_pattern(&f.nv))
		return 1;

	uint64_t t0 = now_ms(), end = t0 + (uint64_t)seconds * 1000u, iters = 0, last = t0;
	while (now_ms() < end) {
		iters++;
		unsigned op = (unsigned)rndn(&f.r, 1000);
		if (op < 380)
			op_map(&f);
		else if (op < 560)
			op_unmap(&f);
		else if (op < 680)
			op_badioctl(&f);
		else if (op < 760)
			op_info(&f);
		else if (op < 830)
			op_reads(&f);
		else if (op < 850)
			op_reads_dmabuf(&f);
		else if (op < 900)
			op_mmap(&f);
		else if (op < 915) {
			kio(f.fd, GPUNVME_KMOD_DISABLE, NULL);
			f.nv.ready = 0; /* the module disabled it: enable again before reads */
		} else if (op < 935)
			op_fork(&f, 0);
		else if (op < 940)
			op_fork(&f, 1);
		else if (op < 950)
			op_threads(&f, nthreads, 50 + (unsigned)rndn(&f.r, 400));
		else if (op < 953)
			op_close_reopen(&f, vmlck0);
		if (now_ms() - last >= 10000) {
			last = now_ms();
			printf("kmod_fuzz: %" PRIu64 " s: %" PRIu64 " iterations, %lu ioctls, %" PRIu64 " maps, %" PRIu64
			       " reads, %d failures\n",
			       (last - t0) / 1000, iters, (unsigned long)atomic_load(&g_ioctls), f.maps_ok, f.reads,
			       atomic_load(&g_fails));
			fflush(stdout);
		}
		if (atomic_load(&g_fails) > 50)
			break;
	}
	/* end: everything unmapped, controller off: back to the start */
	while (f.nhandles)
		kunmap(f.fd, f.handles[--f.nhandles]);
	nv_down(&f.nv);
	int64_t p1 = kpinned(f.fd);
	if (p1 != pinned0) {
		/* which mappings are left: every handle up to the largest seen */
		unsigned left = 0;
		for (uint32_t h = 1; h <= atomic_load(&g_maxh) + 64; h++)
			if (kunmap(f.fd, h) == 0 && left++ < 20)
				printf("kmod_fuzz: handle %u was still mapped\n", h);
		printf("kmod_fuzz: %u mappings left; pinned now %" PRId64 "\n", left, kpinned(f.fd));
	}
	CHECKF(p1 == pinned0, "module pinned %" PRId64 " bytes after every unmap and DISABLE (start %" PRId64 ")", p1,
	       pinned0);
	munmap((void *)f.bar, f.bar_len);
	close(f.fd);
	int fd = dev_open();
	int64_t p2 = fd >= 0 ? kpinned(fd) : -1;
	long l2 = vmlck_kb(getpid());
	CHECKF(fd >= 0 && p2 == 0, "after close: reopened, module pinned %" PRId64 " bytes", p2);
	CHECKF(l2 == vmlck0, "after close: VmLck %ld kB (start %ld kB)", l2, vmlck0);
	if (fd >= 0)
		close(fd);
	printf("kmod_fuzz: RESULT seed %" PRIu64 " seconds %.1f iterations %" PRIu64 " ioctls %lu maps %" PRIu64
	       " reads %" PRIu64 " failures %d\n",
	       seed, (double)(now_ms() - t0) / 1000.0, iters, (unsigned long)atomic_load(&g_ioctls), f.maps_ok, f.reads,
	       atomic_load(&g_fails));
	return atomic_load(&g_fails) ? 1 : 0;
}

/* ---- scenarios ---------------------------------------------------------- */

/* Reads in flight, then UNMAP: the pages stay pinned and mapped (retired)
 * until the controller stops; every read completes into them. Then the
 * owner resets the controller itself: the next ioctl releases them. */
static int cmd_unmap_inflight(void)
{
	struct nv n;
	memset(&n, 0, sizeof(n));
	n.fd = dev_open();
	if (n.fd < 0 || nv_map_bar(&n) || nv_up(&n)) {
		FAILF("owner set-up on %s", g_dev);
		return 1;
	}
	if (nv_write_pattern(&n))
		return 1;
	long vmlck0 = vmlck_kb(getpid());
	int64_t p0 = kpinned(n.fd);
	for (int round = 0; round < 2; round++) {
		struct guarded g;
		int rc = guarded_setup(n.fd, &g, 48);
		if (rc) {
			FAILF("guarded buffer: %s", strerror(-rc));
			return 1;
		}
		int64_t p1 = kpinned(n.fd);
		for (unsigned i = 0; i < 48; i++)
			nv_read_async(&n, FZ_DISK_OFF + i * PG, PG, &g.tbl[i], i);
		rc = kunmap(n.fd, g.handle);
		int64_t p2 = kpinned(n.fd);
		CHECKF(rc == 0 && p2 == p1 && p1 == p0 + 48 * PG,
		       "round %d: UNMAP with 48 reads in flight: rc %d, pinned %" PRId64 " -> %" PRId64 " -> %" PRId64
		       " (kept: retired)",
		       round, rc, p0, p1, p2);
		unsigned ok = 0;
		for (unsigned i = 0; i < 48; i++)
			ok += nv_reap(&n, 20000) == 0;
		CHECKF(ok == 48, "round %d: %u of 48 reads completed successfully after the UNMAP", round, ok);
		CHECKF(guarded_check(&g, FZ_DISK_OFF, "reads after UNMAP") == 0,
		       "round %d: the data landed in the retired pages, guards untouched", round);
		int64_t p3 = kpinned(n.fd);
		CHECKF(p3 == p1, "round %d: still pinned while the controller runs: %" PRId64, round, p3);
		CHECKF(kunmap(n.fd, g.handle) == -ENOENT, "round %d: the handle is gone at once", round);
		if (round == 0) {
			kio(n.fd, GPUNVME_KMOD_DISABLE, NULL);
			int64_t p4 = kpinned(n.fd);
			CHECKF(p4 == p0, "DISABLE released the retired pages: pinned %" PRId64 " (start %" PRId64 ")", p4, p0);
		} else {
			/* the owner's own reset (CC.EN=0, wait RDY=0) is seen at the next ioctl */
			probe_wr32(&n.p, GPUNVME_REG_CC, 0);
			uint64_t end = now_ms() + 10000;
			while ((probe_rd32(&n.p, GPUNVME_REG_CSTS) & 1) && now_ms() < end)
				sleep_ms(1);
			int64_t p4 = kpinned(n.fd);
			CHECKF(p4 == p0, "after the owner's reset INFO released the retired pages: pinned %" PRId64 " (start %" PRId64 ")", p4, p0);
		}
		guarded_free(&g);
		n.ready = 0;
		if (round == 0 && nv_up(&n))
			return 1;
	}
	nv_down(&n);
	munmap((void *)n.bar, n.bar_len);
	close(n.fd);
	long l = vmlck_kb(getpid());
	CHECKF(l == vmlck0 - (long)(PROBE_MEM_SIZE >> 10) || l == vmlck0, "VmLck %ld kB after close (start %ld kB)", l,
	       vmlck0);
	int fd = dev_open();
	CHECKF(fd >= 0 && kpinned(fd) == 0, "reopened: pinned 0");
	if (fd >= 0)
		close(fd);
	return atomic_load(&g_fails) ? 1 : 0;
}

/* The owner (a child) keeps reads in flight into a shared buffer; the
 * controller goes away under it (PCI remove or driver unbind). The removal
 * must finish (bounded), the owner's pins must go (VmLck), nothing may land
 * after it, the owner's BAR0 access then faults and its ioctls fail. */
static int cmd_gone_inflight(int remove)
{
	size_t blen = 32 * PG;
	uint8_t *buf = mmap(NULL, blen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	/* the owner's counters, for the report: submitted, completed */
	volatile uint64_t *cnt = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int pfd[2], qfd[2];
	if (buf == MAP_FAILED || pipe(pfd) || pipe(qfd))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		close(qfd[1]);
		struct nv n;
		memset(&n, 0, sizeof(n));
		n.fd = dev_open();
		uint64_t tbl[32];
		uint32_t h;
		if (n.fd < 0 || nv_map_bar(&n) || nv_up(&n) ||
		    kmap(n.fd, GPUNVME_KMOD_USER, -1, (uintptr_t)buf, blen, tbl, &h))
			_exit(2);
		volatile unsigned k = 0;
		volatile int told = 0;
		char go = 0;
		struct pollfd pq = { .fd = qfd[0], .events = POLLIN };
		/* a doorbell write after the removal faults (SIGBUS): from
		 * there, wait for the parent's word */
		struct sigaction sa = { .sa_handler = on_fault };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGBUS, &sa, NULL);
		sigaction(SIGSEGV, &sa, NULL);
		if (sigsetjmp(g_jmp, 1) == 0) {
			for (;;) {
				while (n.outstanding < 48) {
					nv_read_async(&n, (uint64_t)(k % 1024) * PG * 8, PG, &tbl[k % 32], k);
					k++;
				}
				if (!told && k > 200) {
					if (write(pfd[1], "r", 1) != 1)
						_exit(3);
					told = 1;
				}
				if (poll(&pq, 1, 0) == 1)
					break;
				/* completions stop with the removal: bounded */
				cnt[0] = k;
				if (nv_reap(&n, 50) != PROBE_TIMEOUT)
					cnt[1]++;
			}
		}
		if (poll(&pq, 1, 60000) != 1 || read(qfd[0], &go, 1) != 1)
			_exit(5);
		struct gpunvme_kmod_info in;
		int e = kinfo(n.fd, &in);
		int m = kmap(n.fd, GPUNVME_KMOD_USER, -1, (uintptr_t)buf, PG, tbl, &h);
		int64_t v = bar_read(n.bar, 0x08);
		int mm = mmap(NULL, PG, PROT_READ, MAP_SHARED, n.fd, 0) == MAP_FAILED;
		printf("owner: after the removal: INFO %d, MAP %d, BAR0 read %s, new mmap %s\n", e, m,
		       v < 0 ? "faults" : "works", mm ? "refused" : "allowed");
		fflush(stdout);
		_exit(e == -ENODEV && m == -ENODEV && v < 0 && mm ? 0 : 4);
	}
	close(pfd[1]);
	close(qfd[0]);
	char c = 0;
	int ready = read(pfd[0], &c, 1) == 1;
	CHECKF(ready, "owner has reads in flight");
	if (!ready) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 1;
	}
	long owner_lck = vmlck_kb(pid);
	char path[128];
	uint64_t t0 = now_ms();
	int rc;
	if (remove) {
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/remove", g_bdf);
		rc = sysfs_write(path, "1");
	} else {
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver/unbind", g_bdf);
		rc = sysfs_write(path, g_bdf);
	}
	uint64_t took = now_ms() - t0;
	CHECKF(rc == 0, "%s with the owner reading: %s (%" PRIu64 " ms)", remove ? "PCI remove" : "unbind",
	       rc ? strerror(-rc) : "done", took);
	long owner_lck2 = vmlck_kb(pid);
	CHECKF(owner_lck2 >= 0 && owner_lck2 <= owner_lck - (long)((PROBE_MEM_SIZE + blen) >> 10),
	       "the owner's pins released by the removal: VmLck %ld -> %ld kB", owner_lck, owner_lck2);
	if (!remove)
		CHECKF((pci_command(g_bdf) & 4) == 0, "bus mastering off after the unbind (command 0x%04x)",
		       pci_command(g_bdf));
	/* nothing lands after the removal returned */
	memset(buf, POISON, blen);
	uint64_t phys0[32];
	for (size_t i = 0; i < blen / PG; i++)
		phys0[i] = probe_virt_to_phys(buf + i * PG);
	uint64_t tp = now_ms(), c0 = cnt[0], c1 = cnt[1];
	sleep_ms(2000);
	printf("owner: %" PRIu64 " reads submitted, %" PRIu64 " completed at the poison; %" PRIu64 ", %" PRIu64
	       " 2 s later\n", c0, c1, cnt[0], cnt[1]);
	size_t bad = 0;
	for (size_t i = 0; i < blen; i++)
		bad += buf[i] != POISON;
	/* which pages, where they are, what landed (DMA of disk data, or
	 * anything else) */
	for (size_t i = 0; bad && i < blen / PG; i++) {
		size_t nb = 0, first = PG;
		for (size_t j = 0; j < PG; j++)
			if (buf[i * PG + j] != POISON) {
				nb++;
				if (first == PG)
					first = j;
			}
		if (nb)
			printf("page %zu: %zu bytes changed from byte %zu (0x%02x 0x%02x 0x%02x 0x%02x), at 0x%" PRIx64
			       " when poisoned, 0x%" PRIx64 " now, %" PRIu64 " ms after the poison\n",
			       i, nb, first, buf[i * PG + first], buf[i * PG + first + 1 < blen ? i * PG + first + 1 : 0],
			       buf[i * PG + 8], buf[i * PG + 100], phys0[i], probe_virt_to_phys(buf + i * PG), now_ms() - tp);
	}
	CHECKF(bad == 0, "the owner's buffer, poisoned after the removal, unchanged 2 s later (%zu bytes changed)", bad);
	if (write(qfd[1], "g", 1) != 1)
		FAILF("tell the owner");
	int st = 0;
	pid_t w = 0;
	for (int i = 0; i < 100 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
		sleep_ms(100);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "owner: ioctls ENODEV, BAR0 access faults, no new mmap after the removal (status 0x%x)", st);
	CHECKF(access(g_dev, F_OK) != 0, "%s gone", g_dev);
	return atomic_load(&g_fails) ? 1 : 0;
}

/*
 * BAR0 mmap racing an unbind. Threads map BAR0 again and again (each keeps
 * its last MU_KEEP mappings) while the main thread unbinds the driver.
 * Afterwards every mapping left must fault on access: one made between the
 * module's ->mmap and the vma's linking into the file used to miss the
 * unbind's zap and keep the registers of a device the module no longer
 * owns. Before the unbind, a fresh mapping (mapped at its first access)
 * reads the same VS as the first one.
 */
#define MU_THREADS 3
#define MU_KEEP 64
struct mu {
	int fd;
	size_t len;
	void *keep[MU_KEEP];
	unsigned next;
	unsigned long made, enodev, other;
	atomic_int *stop;
};
static void *mu_thread(void *arg)
{
	struct mu *u = arg;
	while (!atomic_load(u->stop)) {
		void *p = mmap(NULL, u->len, PROT_READ | PROT_WRITE, MAP_SHARED, u->fd, 0);
		if (p == MAP_FAILED) {
			if (errno == ENODEV) {
				u->enodev++;
				break; /* the unbind is through */
			}
			u->other++;
			continue;
		}
		u->made++;
		void **slot = &u->keep[u->next++ % MU_KEEP];
		if (*slot)
			munmap(*slot, u->len);
		*slot = p;
	}
	return NULL;
}
static int cmd_mmap_unbind(void)
{
	struct gpunvme_kmod_info in;
	int fd = dev_open_info(&in);
	if (fd < 0)
		return 1;
	size_t bl = (in.bar0_len + PG - 1) & ~(size_t)(PG - 1);
	void *first = mmap(NULL, bl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	void *fresh = mmap(NULL, bl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (first == MAP_FAILED || fresh == MAP_FAILED) {
		FAILF("mmap BAR0: %s", strerror(errno));
		return 1;
	}
	int64_t vs = bar_read(first, 0x08), vs2 = bar_read(fresh, 0x08), last = bar_read(fresh, (size_t)in.bar0_len - 4);
	CHECKF(vs > 0 && vs == vs2 && last >= 0,
	       "BAR0 read through two mappings: VS 0x%" PRIx64 " and 0x%" PRIx64 ", its last word %s", vs, vs2,
	       last >= 0 ? "readable" : "faults");
	munmap(fresh, bl);
	atomic_int stop = 0;
	struct mu u[MU_THREADS];
	pthread_t th[MU_THREADS];
	for (int i = 0; i < MU_THREADS; i++) {
		u[i] = (struct mu){ .fd = fd, .len = bl, .stop = &stop };
		pthread_create(&th[i], NULL, mu_thread, &u[i]);
	}
	sleep_ms(200);
	char path[128];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver/unbind", g_bdf);
	int rc = sysfs_write(path, g_bdf);
	CHECKF(rc == 0, "unbind with BAR0 being mapped by %d threads: %s", MU_THREADS, rc ? strerror(-rc) : "done");
	sleep_ms(50);
	atomic_store(&stop, 1);
	unsigned long made = 0, enodev = 0, other = 0, left = 0, reach = 0;
	for (int i = 0; i < MU_THREADS; i++) {
		pthread_join(th[i], NULL);
		made += u[i].made;
		enodev += u[i].enodev;
		other += u[i].other;
		for (unsigned k = 0; k < MU_KEEP; k++)
			if (u[i].keep[k]) {
				left++;
				reach += bar_read(u[i].keep[k], 0x08) >= 0;
				munmap(u[i].keep[k], bl);
			}
	}
	printf("%lu mappings made, %lu threads told ENODEV, %lu other mmap errors; %lu kept to the end\n", made, enodev,
	       other, left);
	CHECKF(made > 0 && other == 0, "the threads mapped BAR0 (%lu times) with no error but ENODEV (%lu)", made, other);
	CHECKF(reach == 0, "after the unbind no mapping reaches the registers: %lu of %lu do", reach, left);
	CHECKF(bar_read(first, 0x08) < 0, "the first mapping faults after the unbind");
	munmap(first, bl);
	close(fd);
	return atomic_load(&g_fails) ? 1 : 0;
}

/* rmmod while the file is open, and while only a BAR0 mapping holds it:
 * refused (the file's module reference). */
static int cmd_rmmod_open(void)
{
	int fd = dev_open_or_fail();
	if (fd < 0)
		return 1;
	long rc = syscall(SYS_delete_module, "gpunvme", O_NONBLOCK);
	int e = errno;
	CHECKF(rc != 0 && (e == EWOULDBLOCK || e == EBUSY), "rmmod while open refused: rc %ld (%s)", rc, strerror(e));
	struct gpunvme_kmod_info in;
	kinfo(fd, &in);
	void *b = mmap(NULL, in.bar0_len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	CHECKF(b != MAP_FAILED, "BAR0 mapped, file closed");
	rc = syscall(SYS_delete_module, "gpunvme", O_NONBLOCK);
	e = errno;
	CHECKF(rc != 0 && (e == EWOULDBLOCK || e == EBUSY), "rmmod with only BAR0 mapped refused: rc %ld (%s)", rc,
	       strerror(e));
	CHECKF(b != MAP_FAILED && bar_read(b, 0x08) > 0, "BAR0 still readable");
	if (b != MAP_FAILED)
		munmap(b, in.bar0_len);
	fd = dev_open();
	CHECKF(fd >= 0 && kpinned(fd) == 0, "the module still works after the refused rmmods");
	if (fd >= 0)
		close(fd);
	return atomic_load(&g_fails) ? 1 : 0;
}

static void *open_thread(void *arg)
{
	int *res = arg;
	int fd = dev_open();
	*res = fd >= 0 ? fd : -errno;
	return NULL;
}

/* One owner: a second open (same process, another thread, another
 * process) gets EBUSY; a fork child sharing the file keeps it owned after
 * the parent's close; once every holder is gone the next open works. */
static int cmd_two_openers(void)
{
	int fd = dev_open_or_fail();
	if (fd < 0)
		return 1;
	int fd2 = dev_open();
	CHECKF(fd2 < 0 && errno == EBUSY, "second open, same thread: %s", fd2 < 0 ? strerror(errno) : "succeeded");
	if (fd2 >= 0)
		close(fd2);
	int res = 0;
	pthread_t t;
	pthread_create(&t, NULL, open_thread, &res);
	pthread_join(t, NULL);
	CHECKF(res == -EBUSY, "second open from another thread: %d", res);
	if (res >= 0)
		close(res);
	pid_t pid = fork();
	if (pid == 0) {
		int f = dev_open();
		_exit(f < 0 && errno == EBUSY ? 0 : 1);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "second open from another process: EBUSY");
	/* many at once */
	pthread_t th[8];
	int r8[8];
	for (int i = 0; i < 8; i++)
		pthread_create(&th[i], NULL, open_thread, &r8[i]);
	int busy = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		busy += r8[i] == -EBUSY;
		if (r8[i] >= 0)
			close(r8[i]);
	}
	CHECKF(busy == 8, "8 racing opens while owned: %d refused with EBUSY", busy);
	/* a child holding the inherited file keeps the controller owned */
	int pp[2];
	if (pipe(pp))
		return 1;
	pid = fork();
	if (pid == 0) {
		close(pp[1]);
		char c;
		if (read(pp[0], &c, 1) < 0)
			_exit(1);
		_exit(0); /* its exit releases the file */
	}
	close(pp[0]);
	close(fd);
	fd2 = dev_open();
	CHECKF(fd2 < 0 && errno == EBUSY, "owner closed, fork child still holds the file: open %s",
	       fd2 < 0 ? strerror(errno) : "succeeded");
	if (fd2 >= 0)
		close(fd2);
	close(pp[1]);
	waitpid(pid, &st, 0);
	fd2 = dev_open();
	CHECKF(fd2 >= 0, "every holder gone: open works (%s)", fd2 < 0 ? strerror(errno) : "ok");
	if (fd2 >= 0)
		close(fd2);
	/* racing opens with no owner: exactly one wins */
	for (int i = 0; i < 8; i++)
		pthread_create(&th[i], NULL, open_thread, &r8[i]);
	int won = 0;
	busy = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		won += r8[i] >= 0;
		busy += r8[i] == -EBUSY;
	}
	for (int i = 0; i < 8; i++)
		if (r8[i] >= 0)
			close(r8[i]);
	CHECKF(won == 1 && busy == 7, "8 racing opens, no owner: %d won, %d EBUSY", won, busy);
	return atomic_load(&g_fails) ? 1 : 0;
}

/* As nobody (no CAP_IPC_LOCK) with RLIMIT_MEMLOCK at 256 KiB: single pages
 * map until the limit, then ENOMEM; nothing leaks: unmapping and exiting
 * give everything back. A peer-BAR map as nobody: EPERM. */
static int cmd_memlock(void)
{
	int fd = dev_open_or_fail();
	if (fd < 0)
		return 1;
	int64_t p0 = kpinned(fd);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit rl = { 256 << 10, 256 << 10 };
		if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgid(65534) || setuid(65534))
			_exit(10);
		uint8_t *mem = mmap(NULL, 128 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			_exit(11);
		uint32_t h[128];
		uint64_t tbl[4];
		int n = 0, rc = 0;
		for (n = 0; n < 128; n++) {
			rc = kmap(fd, GPUNVME_KMOD_USER, -1, (uintptr_t)(mem + n * PG), PG, tbl, &h[n]);
			if (rc)
				break;
		}
		long lck = vmlck_kb(getpid()); /* -1 where nobody may not read it */
		int64_t pin = kpinned(fd);
		printf("nobody: %d single-page maps under a 256 KiB memlock limit, then %s; VmLck %ld kB, module pinned %" PRId64 "\n",
		       n, rc ? strerror(-rc) : "no failure", lck, pin);
		int code = 0;
		if (n != 64 || rc != -ENOMEM)
			code |= 1;
		if ((lck != -1 && lck != 256) || pin != (int64_t)64 * PG)
			code |= 2;
		/* a table too small is reported before anything is pinned */
		struct gpunvme_kmod_map sm = { .kind = GPUNVME_KMOD_USER, .addr = (uintptr_t)mem, .len = 16 * PG };
		sm.table = (uintptr_t)tbl;
		sm.table_entries = 4;
		if (ioctl(fd, GPUNVME_KMOD_MAP, &sm) == 0 || errno != ENOSPC || sm.table_entries != 16)
			code |= 4;
		uint64_t big[16];
		if (kmap(fd, GPUNVME_KMOD_USER, -1, (uintptr_t)mem, 16 * PG, big, &h[127]) != -ENOMEM)
			code |= 4;
		for (int i = 0; i < n / 2; i++)
			kunmap(fd, h[i]);
		/* the controller is not enabled: unmapped pages go at once */
		lck = vmlck_kb(getpid());
		if ((lck != -1 && lck != 256 - (n / 2) * 4) || kpinned(fd) != (int64_t)(n - n / 2) * PG)
			code |= 8;
		/* remap what was freed: the memlock charge was given back */
		for (int i = 0; i < n / 2; i++)
			if (kmap(fd, GPUNVME_KMOD_USER, -1, (uintptr_t)(mem + i * PG), PG, tbl, &h[i]))
				code |= 16;
		/* another device's BAR is /dev/mem's power: CAP_SYS_RAWIO only */
		struct gpunvme_kmod_map pm = { .kind = GPUNVME_KMOD_PEER, .len = PG, .bar = 2 };
		memcpy(pm.peer, "0000:00:10.0", 12);
		pm.table = (uintptr_t)tbl;
		pm.table_entries = 1;
		if (ioctl(fd, GPUNVME_KMOD_MAP, &pm) == 0 || errno != EPERM)
			code |= 32;
		_exit(code); /* with 64 pages mapped: the maps stay on the file */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "memlock exhaustion as nobody: 64 pages then ENOMEM, counts exact, freed pages reusable (status 0x%x: 1 "
	       "count, 2 accounting, 4 big map, 8 unmap accounting, 16 remap, 32 peer map allowed)",
	       st);
	int64_t p1 = kpinned(fd);
	CHECKF(p1 == p0 + 64 * PG, "the dead child's maps stay on the shared file: pinned %" PRId64, p1);
	close(fd);
	fd = dev_open();
	CHECKF(fd >= 0 && kpinned(fd) == p0, "after close: pinned back to %" PRId64, p0);
	if (fd >= 0)
		close(fd);
	return atomic_load(&g_fails) ? 1 : 0;
}

/* BAR0 mmaps that must be refused, and the ones that must work. */
static int cmd_mmap_bounds(void)
{
	struct gpunvme_kmod_info in;
	int fd = dev_open_info(&in);
	if (fd < 0)
		return 1;
	size_t bl = (in.bar0_len + PG - 1) & ~(size_t)(PG - 1);
	struct {
		size_t len;
		off_t off;
		int flags;
		int ok;
		const char *what;
	} c[] = {
		{ bl, 0, MAP_SHARED, 1, "all of BAR0" },
		{ PG, 0, MAP_SHARED, 1, "its first page" },
		{ bl + PG, 0, MAP_SHARED, 0, "one page more than BAR0" },
		{ bl * 2, 0, MAP_SHARED, 0, "twice BAR0" },
		{ (size_t)1 << 30, 0, MAP_SHARED, 0, "1 GiB" },
		{ PG, PG, MAP_SHARED, 0, "offset 4096" },
		{ PG, (off_t)bl, MAP_SHARED, 0, "offset at BAR0's end" },
		{ PG, (off_t)1 << 40, MAP_SHARED, 0, "offset 1 TiB" },
		{ bl, 0, MAP_PRIVATE, 0, "MAP_PRIVATE" },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		void *p = mmap(NULL, c[i].len, PROT_READ | PROT_WRITE, c[i].flags, fd, c[i].off);
		int ok = p != MAP_FAILED;
		CHECKF(ok == c[i].ok, "mmap %s (%zu bytes at 0x%llx): %s", c[i].what, c[i].len, (long long)c[i].off,
		       ok ? "mapped" : strerror(errno));
		if (ok)
			munmap(p, c[i].len);
	}
	void *p = mmap(NULL, bl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED) {
		void *q = mremap(p, bl, bl + PG, MREMAP_MAYMOVE);
		CHECKF(q == MAP_FAILED, "mremap cannot grow the BAR0 mapping");
		CHECKF(madvise(p, bl, MADV_DOFORK) != 0, "MADV_DOFORK refused (the mapping must not reach a child)");
		pid_t pid = fork();
		if (pid == 0)
			_exit(bar_read(p, 0x08) == -1 ? 0 : 1);
		int st = 0;
		waitpid(pid, &st, 0);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a fork child has no BAR0 mapping");
		munmap(p, bl);
	}
	close(fd);
	return atomic_load(&g_fails) ? 1 : 0;
}

/* A MAP whose pages (or table) fault into a userfaultfd nobody serves: it
 * waits, and must not hold the controller's lock meanwhile (INFO,
 * DISABLE, other MAPs and an unbind would wait for ever with it). */
struct stall {
	int fd;
	uint8_t *mem;
	uint64_t *table;
	int rc;
	atomic_int done;
};
static void *stall_thread(void *arg)
{
	struct stall *s = arg;
	uint32_t h;
	s->rc = kmap(s->fd, GPUNVME_KMOD_USER, -1, (uintptr_t)s->mem, 4 * PG, s->table, &h);
	atomic_store(&s->done, 1);
	return NULL;
}
struct quick {
	int fd;
	atomic_int done;
	int rc;
};
static void *quick_thread(void *arg)
{
	struct quick *q = arg;
	struct gpunvme_kmod_info in;
	q->rc = kinfo(q->fd, &in);
	if (!q->rc)
		q->rc = kio(q->fd, GPUNVME_KMOD_DISABLE, NULL) ? -errno : 0;
	atomic_store(&q->done, 1);
	return NULL;
}
static int cmd_fault_stall(void)
{
	int fd = dev_open_or_fail();
	if (fd < 0)
		return 1;
	for (int which = 0; which < 2; which++) {
		int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
		if (uffd < 0) {
			printf("SKIP userfaultfd: %s\n", strerror(errno));
			close(fd);
			return 77;
		}
		struct uffdio_api api = { .api = UFFD_API };
		uint8_t *mem = mmap(NULL, 8 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		uint64_t *tbl = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (ioctl(uffd, UFFDIO_API, &api) || mem == MAP_FAILED || tbl == MAP_FAILED) {
			FAILF("userfaultfd set-up: %s", strerror(errno));
			return 1;
		}
		/* which 0: the pages fault; 1: they are there, the table faults */
		struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
		if (which == 0) {
			reg.range.start = (uintptr_t)mem;
			reg.range.len = 4 * PG;
		} else {
			memset(mem, 1, 4 * PG);
			reg.range.start = (uintptr_t)tbl;
			reg.range.len = PG;
		}
		if (ioctl(uffd, UFFDIO_REGISTER, &reg)) {
			FAILF("UFFDIO_REGISTER: %s", strerror(errno));
			return 1;
		}
		struct stall s = { .fd = fd, .mem = mem, .table = tbl };
		pthread_t ts, tq;
		pthread_create(&ts, NULL, stall_thread, &s);
		struct pollfd pf = { .fd = uffd, .events = POLLIN };
		int faulted = poll(&pf, 1, 3000) == 1; /* 6.1 never faults for pages: see below */
		if (which == 0 && !faulted) {
			/* 6.1: a FOLL_LONGTERM pin faults without FAULT_FLAG_ALLOW_RETRY,
			 * so userfaultfd refuses to wait (handle_userfault) */
			CHECKF(atomic_load(&s.done) && s.rc == -EFAULT,
			       "pages: this kernel fails a long-term pin of a userfaultfd page at once: %d", s.rc);
		} else {
			CHECKF(faulted && !atomic_load(&s.done), "%s: MAP waits in a userfaultfd fault",
			       which ? "table" : "pages");
		}
		struct quick q = { .fd = fd };
		pthread_create(&tq, NULL, quick_thread, &q);
		uint64_t end = now_ms() + 5000;
		while (!atomic_load(&q.done) && now_ms() < end)
			sleep_ms(10);
		CHECKF(atomic_load(&q.done) && q.rc == 0,
		       "%s: INFO and DISABLE from another thread return while that MAP waits (done %d, rc %d)",
		       which ? "table" : "pages", atomic_load(&q.done), q.rc);
		/* serve the fault: zero pages, as the kernel would */
		struct uffdio_zeropage zp = { .range = reg.range };
		ioctl(uffd, UFFDIO_ZEROPAGE, &zp);
		close(uffd); /* any fault left gets SIGBUS-like EFAULT */
		pthread_join(ts, NULL);
		pthread_join(tq, NULL);
		CHECKF(s.rc == 0 || s.rc == -EFAULT, "%s: the stalled MAP ends once served: %d", which ? "table" : "pages",
		       s.rc);
		munmap(mem, 8 * PG);
		munmap(tbl, PG);
	}
	close(fd);
	fd = dev_open();
	CHECKF(fd >= 0 && kpinned(fd) == 0, "after close: pinned 0");
	if (fd >= 0)
		close(fd);
	return atomic_load(&g_fails) ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "exec-child"))
		return exec_child(atoi(argv[2]));
	if (argc < 3) {
		fprintf(stderr, "usage: kmod_fuzz fuzz|unmap-inflight|remove-inflight|unbind-inflight|rmmod-open|"
				"two-openers|memlock|mmap-bounds|fault-stall BDF [options] (see the source's header)\n");
		return 2;
	}
	snprintf(g_bdf, sizeof(g_bdf), "%s", argv[2]);
	snprintf(g_dev, sizeof(g_dev), "/dev/gpunvme/%s", argv[2]);
	const char *c = argv[1];
	if (!strcmp(c, "fuzz")) {
		unsigned seconds = 60, threads = 4;
		uint64_t seed = 0;
		const char *peer = NULL;
		for (int i = 3; i + 1 < argc; i += 2) {
			if (!strcmp(argv[i], "--seconds"))
				seconds = (unsigned)strtoul(argv[i + 1], NULL, 0);
			else if (!strcmp(argv[i], "--seed"))
				seed = strtoull(argv[i + 1], NULL, 0);
			else if (!strcmp(argv[i], "--threads"))
				threads = (unsigned)strtoul(argv[i + 1], NULL, 0);
			else if (!strcmp(argv[i], "--peer"))
				peer = argv[i + 1];
		}
		if (!seed) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
		}
		return cmd_fuzz(seconds, seed, threads, peer);
	}
	if (!strcmp(c, "unmap-inflight"))
		return cmd_unmap_inflight();
	if (!strcmp(c, "remove-inflight"))
		return cmd_gone_inflight(1);
	if (!strcmp(c, "unbind-inflight"))
		return cmd_gone_inflight(0);
	if (!strcmp(c, "mmap-unbind"))
		return cmd_mmap_unbind();
	if (!strcmp(c, "rmmod-open"))
		return cmd_rmmod_open();
	if (!strcmp(c, "two-openers"))
		return cmd_two_openers();
	if (!strcmp(c, "memlock"))
		return cmd_memlock();
	if (!strcmp(c, "mmap-bounds"))
		return cmd_mmap_bounds();
	if (!strcmp(c, "fault-stall"))
		return cmd_fault_stall();
	fprintf(stderr, "kmod_fuzz: unknown command %s\n", c);
	return 2;
}
