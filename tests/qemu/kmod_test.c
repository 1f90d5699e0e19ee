/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The kmod: bus against memory this project did not allocate, in the QEMU
 * guest (scenarios/kmod_*.sh). Statically linked into the initramfs.
 *
 *   kmod_test vgem URI NSID SLBA NLB SEED
 *       NVMe read into a buffer of the vgem DRM driver (a dma-buf exporter we
 *       did not write), imported by dma-buf fd; checked through the buffer's
 *       own mmap against the pattern (qemu_driver write put it there)
 *   kmod_test peer URI NSID SLBA NLB SEED PEER BAR OFF
 *       NVMe read into a peer device's BAR (ivshmem-plain: a stand-in for GPU
 *       BAR1) through the module's dma_map_resource; checked through the
 *       BAR's sysfs mmap (the host checks the file behind it too)
 *   kmod_test tier3 URI NSID SLBA NLB SEED PEER BAR OFF
 *       the queue pair's SQ and CQ in the peer BAR, data into host memory
 *   kmod_test kill URI NSID NLB
 *       a child reads into a vgem buffer with commands in flight and is
 *       SIGKILLed; the buffer, poisoned after its death, must stay poisoned
 *       (the module stopped the controller before unmapping)
 *   kmod_test pinlimit URI
 *       the module's pin_limit_mb refuses an owner that needs more
 *   kmod_test unbind URI
 *       the controller unbound from the module while a process owns it
 *   kmod_test errors URI PEER
 *       every bad import the API can be given fails with its errno
 *
 * Prints PASS/FAIL lines (check.h); exit 0 only if everything passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/dma-buf.h>

#include "drm_uapi.h"
#include "../harness/check.h"
#include "gpunvme/gpunvme.h"


/* The pattern of tests/qemu/qemu_driver.c: byte i of a run seeded by seed. */
static void pattern(uint8_t *p, size_t n, uint64_t start, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t k = start + i;
		uint32_t x = (uint32_t)(k >> 2) * 2654435761u ^ seed * 40503u ^ 0x9e3779b9u;
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)(x >> (8 * (k & 3)));
	}
}

static struct gpunvme_ctrl *open_ctrl(const char *uri)
{
	struct gpunvme_ctrl *c = NULL;
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.nr_io_queues = 4;
	o.admin_timeout_ms = 20000; /* TCG is slow */
	o.io_timeout_ms = 60000;
	int rc = gpunvme_open(uri, &o, &c);
	CHECK(rc == 0, "open %s: %s", uri, rc ? gpunvme_last_error() : "ok");
	return c;
}

/* A vgem dumb buffer of len bytes as a dma-buf fd, mmapped at *va. */
static int vgem_buffer(size_t len, void **va)
{
	char path[32], name[32];
	int card = -1;
	for (int i = 0; i < 8 && card < 0; i++) {
		snprintf(path, sizeof(path), "/dev/dri/card%d", i);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct t_drm_version v = { .name_len = sizeof(name) - 1, .name = name };
		memset(name, 0, sizeof(name));
		if (ioctl(fd, T_DRM_IOCTL_VERSION, &v) == 0 && strcmp(name, "vgem") == 0)
			card = fd;
		else
			close(fd);
	}
	CHECK(card >= 0, "a vgem DRM device under /dev/dri (modprobe vgem)");
	if (card < 0)
		return -1;
	/* 32 bpp, 1024 wide: one 4 KiB row per line */
	struct t_drm_create_dumb cd = { .height = (uint32_t)(len / 4096), .width = 1024, .bpp = 32 };
	int rc = ioctl(card, T_DRM_IOCTL_MODE_CREATE_DUMB, &cd);
	CHECK(rc == 0 && cd.size >= len, "vgem dumb buffer of %zu bytes: %s (size %llu)", len,
	      rc ? strerror(errno) : "ok", (unsigned long long)cd.size);
	struct t_drm_prime_handle ph = { .handle = cd.handle, .flags = O_CLOEXEC | O_RDWR, .fd = -1 };
	if (!rc)
		rc = ioctl(card, T_DRM_IOCTL_PRIME_HANDLE_TO_FD, &ph);
	CHECK(rc == 0 && ph.fd >= 0, "PRIME export of the vgem buffer: %s", rc ? strerror(errno) : "dma-buf fd");
	close(card); /* the dma-buf keeps the buffer */
	if (rc)
		return -1;
	*va = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ph.fd, 0);
	CHECK(*va != MAP_FAILED, "mmap of the dma-buf: %s", *va == MAP_FAILED ? strerror(errno) : "ok");
	if (*va == MAP_FAILED) {
		close(ph.fd);
		return -1;
	}
	return ph.fd;
}

static void cpu_access(int fd, uint64_t flags)
{
	struct dma_buf_sync s = { .flags = flags | DMA_BUF_SYNC_RW };
	ioctl(fd, DMA_BUF_IOCTL_SYNC, &s);
}

static size_t mismatches(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += a[i] != b[i];
	return bad;
}

/* Read NLB blocks at SLBA into `buf` (DMA memory), compare with the pattern. */
static void read_check(struct gpunvme_ctrl *c, struct gpunvme_qpair *qp, uint32_t nsid, uint64_t slba, uint64_t nlb,
		       uint32_t seed, volatile uint8_t *buf, const char *what)
{
	struct gpunvme_ns_info ni;
	gpunvme_ns_info(c, nsid, &ni);
	size_t len = (size_t)nlb * ni.lba_size;
	uint8_t *want = malloc(len), *got = malloc(len);
	if (!want || !got) {
		CHECK(0, "out of memory");
		goto out;
	}
	pattern(want, len, slba * ni.lba_size, seed);
	int rc = gpunvme_read_sync(qp, nsid, (void *)buf, slba, nlb, NULL);
	CHECK(rc == 0, "read %llu blocks into %s: %s", (unsigned long long)nlb, what, rc ? gpunvme_last_error() : "ok");
	for (size_t i = 0; i < len; i++)
		got[i] = buf[i];
	size_t bad = mismatches(got, want, len);
	CHECK(rc == 0 && bad == 0, "%s holds the pattern seed %u (%zu of %zu bytes differ)", what, seed, bad, len);
out:
	free(want);
	free(got);
}

static int cmd_vgem(const char *uri, uint32_t nsid, uint64_t slba, uint64_t nlb, uint32_t seed)
{
	struct gpunvme_ctrl *c = open_ctrl(uri);
	if (!c)
		return 1;
	struct gpunvme_ns_info ni;
	struct gpunvme_qpair *qp = NULL;
	void *va = NULL;
	int rc = gpunvme_ns_info(c, nsid, &ni);
	size_t len = (size_t)nlb * ni.lba_size;
	/* one page more than the read: the page after it must stay poisoned */
	size_t blen = (len + 4096 + 4095) & ~(size_t)4095;
	int fd = rc ? -1 : vgem_buffer(blen, &va);
	if (fd >= 0) {
		cpu_access(fd, DMA_BUF_SYNC_START);
		memset(va, 0x5a, blen);
		cpu_access(fd, DMA_BUF_SYNC_END);
		struct gpunvme_dma_src src = { .kind = GPUNVME_DMA_SRC_DMABUF, .fd = fd };
		rc = gpunvme_dma_import(c, va, blen, &src);
		CHECK(rc == 0, "import the vgem dma-buf (%zu KiB): %s", blen >> 10, rc ? gpunvme_last_error() : "ok");
		printf("INFO vgem buffer bus address 0x%llx (page 0)\n", (unsigned long long)gpunvme_dma_iova(c, va));
		if (!rc)
			rc = gpunvme_qpair_create(c, 32, &qp);
		if (!rc) {
			cpu_access(fd, DMA_BUF_SYNC_START);
			read_check(c, qp, nsid, slba, nlb, seed, va, "the vgem buffer (seen through its mmap)");
			size_t bad = 0;
			for (size_t i = len; i < blen; i++)
				bad += ((uint8_t *)va)[i] != 0x5a;
			CHECK(bad == 0, "vgem bytes past the read untouched (%zu changed)", bad);
			cpu_access(fd, DMA_BUF_SYNC_END);
		}
		if (qp)
			gpunvme_qpair_destroy(qp);
		gpunvme_dma_free(c, va);
		munmap(va, blen);
		close(fd);
	}
	gpunvme_close(c);
	return check_failures() ? 1 : 0;
}

/* The peer's BAR through sysfs (the CPU's view of what the controller gets
 * through the module's dma_map_resource). */
static void *map_bar(const char *peer, unsigned bar, size_t *len)
{
	char path[96];
	struct stat st;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/resource%u", peer, bar);
	int fd = open(path, O_RDWR | O_SYNC | O_CLOEXEC);
	CHECK(fd >= 0, "open %s: %s", path, fd < 0 ? strerror(errno) : "ok");
	if (fd < 0)
		return NULL;
	fstat(fd, &st);
	*len = (size_t)st.st_size;
	void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(p != MAP_FAILED, "mmap %s (%zu bytes): %s", path, *len, p == MAP_FAILED ? strerror(errno) : "ok");
	return p == MAP_FAILED ? NULL : p;
}

static int cmd_peer(const char *uri, uint32_t nsid, uint64_t slba, uint64_t nlb, uint32_t seed, const char *peer,
		    unsigned bar, size_t off, int tier3)
{
	size_t barlen = 0;
	volatile uint8_t *b = map_bar(peer, bar, &barlen);
	if (!b)
		return 1;
	struct gpunvme_ctrl *c = open_ctrl(uri);
	if (!c)
		return 1;
	struct gpunvme_ns_info ni;
	struct gpunvme_qpair *qp = NULL;
	int rc = gpunvme_ns_info(c, nsid, &ni);
	size_t len = (size_t)nlb * ni.lba_size;
	size_t ilen = (len + 4096 + 4095) & ~(size_t)4095;
	if (tier3)
		ilen = 64 << 10; /* the rings: SQ + CQ of 32 entries fit in 8 KiB */
	CHECK(off + ilen <= barlen, "BAR %u of %s (%zu bytes) holds %zu bytes at 0x%zx", bar, peer, barlen, ilen, off);
	if (off + ilen > barlen)
		goto out;
	for (size_t i = 0; i < ilen; i++)
		b[off + i] = 0x5a;
	struct gpunvme_dma_src src = { .kind = GPUNVME_DMA_SRC_PEER, .peer = peer, .bar = bar, .offset = off };
	rc = gpunvme_dma_import(c, (void *)(b + off), ilen, &src);
	CHECK(rc == 0, "import %zu KiB of %s BAR %u at 0x%zx: %s", ilen >> 10, peer, bar, off,
	      rc ? gpunvme_last_error() : "ok");
	if (rc)
		goto out;
	printf("INFO peer BAR bus address 0x%llx\n", (unsigned long long)gpunvme_dma_iova(c, (void *)(b + off)));
	if (tier3) {
		rc = gpunvme_qpair_create_in(c, 32, (void *)(b + off), ilen, &qp);
		CHECK(rc == 0, "queue pair with SQ and CQ in %s BAR %u: %s", peer, bar, rc ? gpunvme_last_error() : "ok");
		if (!rc) {
			uint8_t *host = gpunvme_dma_alloc(c, len);
			for (int round = 0; host && round < 3; round++)
				read_check(c, qp, nsid, slba, nlb, seed, host, "host memory (queues in the peer BAR)");
			gpunvme_dma_free(c, host);
		}
	} else {
		rc = gpunvme_qpair_create(c, 32, &qp);
		if (!rc) {
			read_check(c, qp, nsid, slba, nlb, seed, b + off, "the peer BAR (seen through its sysfs mmap)");
			size_t bad = 0;
			for (size_t i = len; i < ilen; i++)
				bad += b[off + i] != 0x5a;
			CHECK(bad == 0, "BAR bytes past the read untouched (%zu changed)", bad);
		}
	}
	if (qp)
		gpunvme_qpair_destroy(qp);
	gpunvme_dma_free(c, (void *)(b + off));
out:
	gpunvme_close(c);
	munmap((void *)b, barlen);
	return check_failures() ? 1 : 0;
}

static void no_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	(void)arg;
	(void)cpl;
}

/* The child: reads into the imported buffer, queue kept full, until killed. */
static void kill_child(const char *uri, uint32_t nsid, uint64_t nlb, int fd, void *va, size_t blen, int wpipe)
{
	struct gpunvme_ctrl *c = NULL;
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	o.io_timeout_ms = 60000;
	if (gpunvme_open(uri, &o, &c))
		_exit(2);
	struct gpunvme_dma_src src = { .kind = GPUNVME_DMA_SRC_DMABUF, .fd = fd };
	struct gpunvme_qpair *qp = NULL;
	struct gpunvme_ns_info ni;
	if (gpunvme_dma_import(c, va, blen, &src) || gpunvme_qpair_create(c, 64, &qp) || gpunvme_ns_info(c, nsid, &ni))
		_exit(3);
	size_t per = (size_t)nlb * ni.lba_size;
	uint32_t slots = (uint32_t)(blen / per);
	uint64_t n = 0;
	for (;;) {
		while (gpunvme_qpair_outstanding(qp) < 48) {
			uint32_t k = (uint32_t)(n++ % slots);
			if (gpunvme_read(qp, nsid, (uint8_t *)va + (size_t)k * per, (n * nlb) % (ni.nsze - nlb), nlb, no_cb,
					 NULL))
				break;
		}
		uint32_t out = gpunvme_qpair_outstanding(qp);
		if (n > 256 && wpipe >= 0) {
			/* tell the parent: commands are in flight now */
			if (write(wpipe, &out, sizeof(out)) != (ssize_t)sizeof(out))
				_exit(4);
			close(wpipe);
			wpipe = -1;
		}
		gpunvme_qpair_poll(qp, 8);
	}
}

static int cmd_kill(const char *uri, uint32_t nsid, uint64_t nlb)
{
	size_t blen = 4u << 20;
	void *va = NULL;
	int fd = vgem_buffer(blen, &va);
	if (fd < 0)
		return 1;
	int pfd[2];
	if (pipe(pfd))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		kill_child(uri, nsid, nlb, fd, va, blen, pfd[1]);
		_exit(0);
	}
	close(pfd[1]);
	uint32_t inflight = 0;
	ssize_t got = read(pfd[0], &inflight, sizeof(inflight));
	CHECK(got == (ssize_t)sizeof(inflight) && inflight > 0, "child has %u commands in flight", inflight);
	kill(pid, SIGKILL);
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child killed by SIGKILL (status 0x%x)", st);
	/* The module's release ran: bus mastering is off (config space of the
	 * still-bound device), and the controller disabled (CC.EN=0,
	 * CSTS.RDY=0) as the next owner finds it in BAR0. The next owner's
	 * open turns bus mastering back on, so config space is read first. */
	const char *bdf = strchr(uri, ':') ? strchr(uri, ':') + 1 : uri;
	char path[96];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", bdf);
	int cfd = open(path, O_RDONLY | O_CLOEXEC);
	uint16_t cmd = 0xffff;
	CHECK(cfd >= 0 && pread(cfd, &cmd, 2, 4) == 2 && !(cmd & 4),
	      "bus mastering off after the owner died: PCI command 0x%04x", cmd);
	if (cfd >= 0)
		close(cfd);
	snprintf(path, sizeof(path), "/dev/gpunvme/%s", bdf);
	int bfd = open(path, O_RDWR | O_CLOEXEC);
	volatile uint32_t *regs = bfd >= 0 ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, bfd, 0) : MAP_FAILED;
	CHECK(regs != MAP_FAILED, "map BAR0 through %s: %s", path, regs == MAP_FAILED ? strerror(errno) : "ok");
	if (regs != MAP_FAILED) {
		uint32_t cc = regs[0x14 / 4], csts = regs[0x1c / 4];
		CHECK(!(cc & 1) && !(csts & 1), "controller disabled after the owner died: CC 0x%08x, CSTS 0x%08x", cc, csts);
		munmap((void *)regs, 4096);
	}
	if (bfd >= 0)
		close(bfd);
	/* The child's file is released by now (exit closes files before the
	 * parent is notified): the controller is disabled and the buffer
	 * unmapped for it. Poison, wait, check nothing lands any more. */
	cpu_access(fd, DMA_BUF_SYNC_START);
	memset(va, 0x5a, blen);
	cpu_access(fd, DMA_BUF_SYNC_END);
	struct timespec ts = { 3, 0 };
	nanosleep(&ts, NULL);
	cpu_access(fd, DMA_BUF_SYNC_START);
	size_t bad = 0;
	for (size_t i = 0; i < blen; i++)
		bad += ((uint8_t *)va)[i] != 0x5a;
	cpu_access(fd, DMA_BUF_SYNC_END);
	CHECK(bad == 0, "poisoned buffer unchanged 3 s after the owner died (%zu of %zu bytes changed)", bad, blen);
	munmap(va, blen);
	close(fd);
	close(pfd[0]);
	return check_failures() ? 1 : 0;
}

/* The controller unbound from the module while a process owns it: the
 * unbind completes, the controller is stopped (bus mastering off), and the
 * owner's later release (it is killed afterwards) frees what is left. A
 * kernel oops here ends the guest (oops=panic). */
static int cmd_unbind(const char *uri)
{
	const char *bdf = strchr(uri, ':') ? strchr(uri, ':') + 1 : uri;
	int pfd[2];
	if (pipe(pfd))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		struct gpunvme_ctrl *c = NULL;
		char ok = gpunvme_open(uri, NULL, &c) == 0 ? 'y' : 'n';
		if (write(pfd[1], &ok, 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	char ok = 0;
	CHECK(read(pfd[0], &ok, 1) == 1 && ok == 'y', "owner opened %s", uri);
	char path[96];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver/unbind", bdf);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t w = fd >= 0 ? write(fd, bdf, strlen(bdf)) : -1;
	CHECK(w == (ssize_t)strlen(bdf), "unbind %s while owned: %s", bdf, w < 0 ? strerror(errno) : "done");
	if (fd >= 0)
		close(fd);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", bdf);
	int cfd = open(path, O_RDONLY | O_CLOEXEC);
	uint16_t cmd = 0xffff;
	CHECK(cfd >= 0 && pread(cfd, &cmd, 2, 4) == 2 && !(cmd & 4), "bus mastering off after the unbind: PCI command 0x%04x",
	      cmd);
	if (cfd >= 0)
		close(cfd);
	kill(pid, SIGKILL);
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFSIGNALED(st), "owner ended after the unbind (status 0x%x)", st);
	close(pfd[0]);
	close(pfd[1]);
	return check_failures() ? 1 : 0;
}

/* The module's cap on pinned host memory (pin_limit_mb; root is exempt
 * from RLIMIT_MEMLOCK through CAP_IPC_LOCK, the cap applies to everyone):
 * an owner that needs more fails with -ENOMEM and a message naming it. */
static int set_pin_limit(const char *mb)
{
	int fd = open("/sys/module/gpunvme/parameters/pin_limit_mb", O_WRONLY | O_CLOEXEC);
	ssize_t w = fd >= 0 ? write(fd, mb, strlen(mb)) : -1;
	if (fd >= 0)
		close(fd);
	return w == (ssize_t)strlen(mb) ? 0 : -1;
}

static int cmd_pinlimit(const char *uri)
{
	CHECK(set_pin_limit("1") == 0, "pin_limit_mb := 1");
	struct gpunvme_ctrl *c = NULL;
	int rc = gpunvme_open(uri, NULL, &c); /* queues + a 2 MiB DMA heap chunk: over 1 MiB */
	CHECK(rc == -ENOMEM && strstr(gpunvme_last_error(), "pin_limit_mb"), "open with 1 MiB pinnable: rc %d (%s)",
	      rc, gpunvme_last_error());
	if (!rc)
		gpunvme_close(c);
	CHECK(set_pin_limit("0") == 0, "pin_limit_mb := 0 (no cap)");
	rc = gpunvme_open(uri, NULL, &c);
	CHECK(rc == 0, "open without the cap: %s", rc ? gpunvme_last_error() : "ok");
	if (!rc)
		gpunvme_close(c);
	return check_failures() ? 1 : 0;
}

static int cmd_errors(const char *uri, const char *peer)
{
	struct gpunvme_ctrl *c = open_ctrl(uri);
	if (!c)
		return 1;
	static uint8_t mem[3 * 4096] __attribute__((aligned(4096)));
	struct gpunvme_dma_src src = { .kind = GPUNVME_DMA_SRC_DMABUF, .fd = -1 };
	int rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -EBADF, "dma-buf fd -1: rc %d (%s)", rc, gpunvme_last_error());
	int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	src.fd = nullfd;
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -EINVAL, "a file that is no dma-buf: rc %d (%s)", rc, gpunvme_last_error());
	close(nullfd);
	rc = gpunvme_dma_import(c, mem + 1, 4096, &src);
	CHECK(rc == -EINVAL, "unaligned address: rc %d (%s)", rc, gpunvme_last_error());
	rc = gpunvme_dma_import(c, mem, 100, &src);
	CHECK(rc == -EINVAL, "length not a multiple of 4 KiB: rc %d (%s)", rc, gpunvme_last_error());
	src = (struct gpunvme_dma_src){ .kind = GPUNVME_DMA_SRC_PEER, .peer = "nonsense", .bar = 2 };
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -EINVAL, "peer \"nonsense\": rc %d (%s)", rc, gpunvme_last_error());
	src.peer = "0000:00:1f.7";
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -ENODEV, "peer that does not exist: rc %d (%s)", rc, gpunvme_last_error());
	src.peer = peer;
	src.bar = 7;
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -EINVAL, "BAR 7: rc %d (%s)", rc, gpunvme_last_error());
	src.bar = 2;
	src.offset = 1ull << 40;
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -ERANGE, "offset past the BAR's end: rc %d (%s)", rc, gpunvme_last_error());
	src.offset = 0;
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == 0, "a valid import: %s", rc ? gpunvme_last_error() : "ok");
	int rc2 = gpunvme_dma_import(c, mem + 4096 * 0, 8192, &src);
	CHECK(rc2 == -EEXIST, "overlapping import: rc %d (%s)", rc2, gpunvme_last_error());
	if (!rc)
		gpunvme_dma_free(c, mem);
	src = (struct gpunvme_dma_src){ .kind = GPUNVME_DMA_SRC_NVP2P, .offset = 0x7f0000000000ull };
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -EINVAL, "nvidia_p2p with a 4 KiB length (needs 64 KiB): rc %d (%s)", rc, gpunvme_last_error());
	static uint8_t big[65536] __attribute__((aligned(65536)));
	rc = gpunvme_dma_import(c, big, sizeof(big), &src);
	CHECK(rc == -ENOENT, "nvidia_p2p without nvidia.ko: rc %d (%s)", rc, gpunvme_last_error());
	src.kind = 99;
	rc = gpunvme_dma_import(c, mem, 4096, &src);
	CHECK(rc == -EINVAL, "unknown source kind: rc %d (%s)", rc, gpunvme_last_error());
	/* a second owner is refused while this one has the controller */
	struct gpunvme_ctrl *c2 = NULL;
	rc = gpunvme_open(uri, NULL, &c2);
	CHECK(rc == -EBUSY, "second open while owned: rc %d (%s)", rc, gpunvme_last_error());
	if (!rc)
		gpunvme_close(c2);
	gpunvme_close(c);
	return check_failures() ? 1 : 0;
}

int main(int argc, char **argv)
{
	check_g.verbose = 1;
	if (argc == 7 && !strcmp(argv[1], "vgem"))
		return cmd_vgem(argv[2], (uint32_t)strtoul(argv[3], NULL, 0), strtoull(argv[4], NULL, 0),
				strtoull(argv[5], NULL, 0), (uint32_t)strtoul(argv[6], NULL, 0));
	if (argc == 10 && (!strcmp(argv[1], "peer") || !strcmp(argv[1], "tier3")))
		return cmd_peer(argv[2], (uint32_t)strtoul(argv[3], NULL, 0), strtoull(argv[4], NULL, 0),
				strtoull(argv[5], NULL, 0), (uint32_t)strtoul(argv[6], NULL, 0), argv[7],
				(unsigned)strtoul(argv[8], NULL, 0), (size_t)strtoull(argv[9], NULL, 0),
				!strcmp(argv[1], "tier3"));
	if (argc == 5 && !strcmp(argv[1], "kill"))
		return cmd_kill(argv[2], (uint32_t)strtoul(argv[3], NULL, 0), strtoull(argv[4], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "pinlimit"))
		return cmd_pinlimit(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "unbind"))
		return cmd_unbind(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "errors"))
		return cmd_errors(argv[2], argv[3]);
	fprintf(stderr, "usage: kmod_test vgem|peer|tier3|kill|errors ... (see the source's header)\n");
	return 2;
}
