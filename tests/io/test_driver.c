/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The user-space driver (src/bus, src/ctrl, src/io) against the embedded
 * emulator: bring-up, identify, split and chained transfers, asynchronous
 * queues deeper than the SQ, every error a caller can cause, and controller
 * faults (media error, dropped command, CFS + reset, surprise removal).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "ctrl/ctrl_gpu.h"  /* the bus's device-memory DMA engine */
#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"
#include "harness.h"
#include "randio.h"

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static struct gpunvme_ctrl *open_or_null(const char *uri, uint32_t io_timeout_ms)
{
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	if (io_timeout_ms)
		o.io_timeout_ms = io_timeout_ms;
	struct gpunvme_ctrl *c = NULL;
	int rc = gpunvme_open(uri, &o, &c);
	if (rc)
		fprintf(stderr, "open %s: %d %s\n", uri, rc, gpunvme_last_error());
	return c;
}

TEST_CASE(open_identify)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:64M?lbads=12&ns=null:1T,ram:8M&nsq=8", 0);
	REQUIRE(c);
	struct gpunvme_ctrl_info ci;
	REQUIRE_OK(gpunvme_ctrl_info(c, &ci));
	REQUIRE(!strcmp(ci.transport, "emu"));
	REQUIRE(!strcmp(ci.mn, "gpu-nvme-direct emulator"));
	REQUIRE_EQ(ci.nn, 3u);
	REQUIRE_EQ(ci.nr_io_queues, 8u);
	REQUIRE_EQ(ci.max_xfer, 512u * 1024); /* an emu: string's default MDTS 7 */
	uint32_t ids[8];
	REQUIRE_EQ(gpunvme_ns_list(c, ids, 8), 3);
	struct gpunvme_ns_info ni;
	REQUIRE_OK(gpunvme_ns_info(c, 2, &ni));
	REQUIRE_EQ(ni.lba_size, 4096u);
	REQUIRE_EQ(ni.nsze, (1ull << 40) / 4096);
	REQUIRE_EQ(ni.max_blocks, 128u);
	REQUIRE(gpunvme_ns_info(c, 9, &ni) == -ENOENT);
	REQUIRE(strstr(gpunvme_last_error(), "namespace 9"));
	gpunvme_close(c);
	return 0;
}

/* A transfer of several MiB with MDTS 128 KiB: split into many commands,
 * from a buffer that starts at an odd dword inside DMA memory. */
/* A program without the GPU data path (this one links gpunvme alone): the
 * emu: bus's device-memory DMA engine (src/emu_cuda) is a weak reference
 * nothing resolved, so the bus has none and the hooks do nothing. */
TEST_CASE(no_devmem_engine)
{
	struct gpunvme_ctrl *c = NULL;
	REQUIRE_OK(gpunvme_open("emu:ram:16M", NULL, &c));
	void *e = (void *)1;
	CHECK_OK(gpunvme_ctrl_devmem_attach(c, &e));
	CHECK(e == NULL);
	CHECK_OK(gpunvme_ctrl_devmem_sync(c, e));
	gpunvme_ctrl_devmem_detach(c, e);
	void *p = (void *)1;
	void (*unpin)(void *) = NULL;
	gpunvme_ctrl_devmem_pin(c, 1, &p, &unpin);
	CHECK(p == NULL && unpin == NULL);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(split_roundtrip)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:64M?mdts=5", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 16, &qp));
	size_t len = (5u << 20) + 3 * 512;
	uint8_t *wbuf = gpunvme_dma_alloc(c, len + 4096), *rbuf = gpunvme_dma_alloc(c, len + 4096);
	REQUIRE(wbuf && rbuf);
	uint8_t *w = wbuf + 12, *r = rbuf + 1028;
	fill(w, len, 1);
	uint16_t st = 0;
	REQUIRE_OK(gpunvme_write_sync(qp, 1, w, 777, len / 512, &st));
	REQUIRE_OK(gpunvme_read_sync(qp, 1, r, 777, len / 512, &st));
	REQUIRE(memcmp(w, r, len) == 0);
	struct gpunvme_emu_stats s;
	gpunvme_emu_get_stats(gpunvme_ctrl_emu(c), &s);
	REQUIRE(s.writes >= 41 && s.reads >= 41, "split into %llu writes, %llu reads",
		 (unsigned long long)s.writes, (unsigned long long)s.reads);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* No MDTS: 2 MiB commands whose PRP lists chain over two list pages. */
TEST_CASE(chained_lists)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:64M?mdts=0&lbads=12", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	size_t len = 9u << 20;
	uint8_t *w = gpunvme_dma_alloc(c, len + 8192), *r = gpunvme_dma_alloc(c, len + 8192);
	REQUIRE(w && r);
	fill(w + 2052, len, 2);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, w + 2052, 3, len / 4096, NULL));
	REQUIRE_OK(gpunvme_read_sync(qp, 1, r + 8, 3, len / 4096, NULL));
	REQUIRE(memcmp(w + 2052, r + 8, len) == 0);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

struct counter {
	int done, errors;
};

static void count_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct counter *k = arg;
	k->done++;
	if (cpl->err)
		k->errors++;
}

/* More requests than command ids: the rest wait in the FIFO. */
TEST_CASE(async_deep)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:32M?mdts=2&workers=2", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	const int n = 24;
	const size_t per = 40 * 512; /* 20 KiB = 2 commands at MDTS 16 KiB */
	uint8_t *w = gpunvme_dma_alloc(c, n * per), *r = gpunvme_dma_alloc(c, n * per);
	REQUIRE(w && r);
	fill(w, n * per, 3);
	struct counter k = { 0, 0 };
	for (int i = 0; i < n; i++)
		REQUIRE_OK(gpunvme_write(qp, 1, w + i * per, (uint64_t)i * 64, per / 512, count_cb, &k));
	REQUIRE(gpunvme_qpair_outstanding(qp) == (uint32_t)n);
	for (uint64_t t0 = h_now_ms(); k.done < n && h_now_ms() - t0 < 5000;)
		REQUIRE(gpunvme_qpair_poll(qp, 0) >= 0);
	REQUIRE_EQ(k.done, n);
	REQUIRE_EQ(k.errors, 0);
	k.done = 0;
	for (int i = 0; i < n; i++)
		REQUIRE_OK(gpunvme_read(qp, 1, r + i * per, (uint64_t)i * 64, per / 512, count_cb, &k));
	for (uint64_t t0 = h_now_ms(); k.done < n && h_now_ms() - t0 < 5000;)
		REQUIRE(gpunvme_qpair_poll(qp, 0) >= 0);
	REQUIRE_EQ(k.done, n);
	REQUIRE(memcmp(w, r, n * per) == 0);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

static int wait_one(struct gpunvme_qpair *qp, struct counter *k, int want)
{
	for (uint64_t t0 = h_now_ms(); k->done < want && h_now_ms() - t0 < 5000;)
		if (gpunvme_qpair_poll(qp, 0) < 0)
			return -1;
	return k->done >= want ? 0 : -1;
}

/*
 * The report that found the request/buffer mix-up: depth 4 (3 command ids),
 * a 1 MiB read into A (8 commands at MDTS 128 KiB) and then one into B
 * before polling. A's commands that waited for ids must still target A;
 * B gets exactly its blocks; C, never a target, stays as it was.
 */
TEST_CASE(requests_keep_their_buffers)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M?mdts=5", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 4, &qp));
	const size_t mib = 1u << 20;
	uint8_t *w = gpunvme_dma_alloc(c, 2 * mib), *a = gpunvme_dma_alloc(c, mib), *b = gpunvme_dma_alloc(c, mib),
		*cc = gpunvme_dma_alloc(c, mib), *want_c = malloc(mib);
	REQUIRE(w && a && b && cc && want_c);
	fill(w, 2 * mib, 21);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, w, 0, 2 * mib / 512, NULL));
	memset(a, 0x11, mib);
	memset(b, 0x22, mib);
	fill(cc, mib, 22);
	memcpy(want_c, cc, mib);
	struct counter k = { 0, 0 };
	REQUIRE_OK(gpunvme_read(qp, 1, a, 0, mib / 512, count_cb, &k));
	REQUIRE_OK(gpunvme_read(qp, 1, b, mib / 512, mib / 512, count_cb, &k));
	for (uint64_t t0 = h_now_ms(); k.done < 2 && h_now_ms() - t0 < 5000;)
		REQUIRE(gpunvme_qpair_poll(qp, 0) >= 0);
	REQUIRE_EQ(k.done, 2);
	REQUIRE_EQ(k.errors, 0);
	REQUIRE(memcmp(a, w, mib) == 0);
	REQUIRE(memcmp(b, w + mib, mib) == 0);
	REQUIRE(memcmp(cc, want_c, mib) == 0);
	free(want_c);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

static int randio_on(const char *uri, uint32_t max_cmds, uint32_t ops, uint64_t seed)
{
	struct gpunvme_ctrl *c = open_or_null(uri, 0);
	REQUIRE(c);
	struct randio_opts o;
	randio_defaults(&o);
	o.max_cmds = max_cmds;
	o.ops = ops;
	o.seed = seed;
	int rc = randio_run(c, &o, stderr);
	gpunvme_close(c);
	REQUIRE(rc == 0, "randio on %s (seed %llu)", uri, (unsigned long long)seed);
	return 0;
}

/* Randomized: depths 2..8, requests of 1..64 commands, many buffers. */
TEST_CASE(randio_mdts16k)
{
	return randio_on("emu:ram:16M?mdts=2&workers=2", 64, 40, 1);
}

TEST_CASE(randio_4k_mdts32k)
{
	return randio_on("emu:ram:16M?lbads=12&mdts=3&workers=3", 64, 40, 2);
}

TEST_CASE(randio_mdts128k)
{
	return randio_on("emu:ram:16M?workers=2", 64, 16, 3);
}

/* 2 MiB commands: PRP lists chained over two list pages. */
TEST_CASE(randio_no_mdts)
{
	return randio_on("emu:ram:32M?mdts=0&lbads=12&workers=2", 8, 16, 4);
}

TEST_CASE(zeroes_dealloc_flush)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 0, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 1 << 20);
	REQUIRE(b);
	memset(b, 0xa5, 1 << 20);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, b, 0, 2048, NULL));
	struct counter k = { 0, 0 };
	REQUIRE_OK(gpunvme_write_zeroes(qp, 1, 10, 100, count_cb, &k));
	REQUIRE_OK(gpunvme_deallocate(qp, 1, 500, 600, count_cb, &k));
	REQUIRE_OK(gpunvme_flush(qp, 1, count_cb, &k));
	REQUIRE_OK(gpunvme_flush(qp, GPUNVME_NSID_ALL, count_cb, &k));
	REQUIRE_OK(wait_one(qp, &k, 4));
	REQUIRE_EQ(k.errors, 0);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 0, 2048, NULL));
	for (size_t i = 0; i < (1u << 20); i++) {
		size_t lba = i / 512;
		uint8_t want = ((lba >= 10 && lba < 110) || (lba >= 500 && lba < 1100)) ? 0 : 0xa5;
		REQUIRE(b[i] == want, "byte %zu (lba %zu) = 0x%02x", i, lba, b[i]);
	}
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(bad_arguments)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:1M?nsq=1", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp, *qp2;
	REQUIRE_OK(gpunvme_qpair_create(c, 4, &qp));
	REQUIRE(gpunvme_qpair_create(c, 4, &qp2) == -EBUSY);
	REQUIRE(strstr(gpunvme_last_error(), "in use"));
	REQUIRE(gpunvme_qpair_create(c, 1, &qp2) == -EINVAL);
	uint8_t *b = gpunvme_dma_alloc(c, 8192);
	static uint8_t not_dma[4096] __attribute__((aligned(4096)));
	REQUIRE(gpunvme_read(qp, 1, b, 2047, 2, NULL, NULL) == -ERANGE);
	REQUIRE(strstr(gpunvme_last_error(), "past the end"));
	REQUIRE(gpunvme_read(qp, 1, b, UINT64_MAX, 1, NULL, NULL) == -ERANGE);
	REQUIRE(gpunvme_read(qp, 1, b, 0, 0, NULL, NULL) == -EINVAL);
	REQUIRE(gpunvme_read(qp, 1, b + 2, 0, 1, NULL, NULL) == -EINVAL);
	REQUIRE(strstr(gpunvme_last_error(), "aligned"));
	REQUIRE(gpunvme_read(qp, 1, not_dma, 0, 1, NULL, NULL) == -EFAULT);
	REQUIRE(gpunvme_read(qp, 1, b + 4096, 0, 9, NULL, NULL) == -EFAULT); /* runs off the end */
	REQUIRE(gpunvme_read(qp, 2, b, 0, 1, NULL, NULL) == -ENODEV);
	REQUIRE(gpunvme_qpair_outstanding(qp) == 0);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(bad_uris)
{
	static const struct {
		const char *uri, *msg;
		int rc;
	} t[] = {
		{ "", "empty device URI", -EINVAL },
		{ "foo:bar", "unknown bus", -EINVAL },
		{ "ram:1G", "unknown bus", -EINVAL },
		{ "nvme0", "not a device URI", -EINVAL },
		{ "vfio:", "missing PCI address", -EINVAL },
		{ "emu:", "", -EINVAL },
		{ "emu:ram:0", "size", -EINVAL },
		{ "emu:ram:12Q", "size", -EINVAL },
		{ "emu:ram:1M?lbads=10", "lbads: '10' is not allowed", -EINVAL },
		{ "emu:ram:1M?bogus=1", "unknown emulator option 'bogus'", -EINVAL },
		{ "emu:/nonexistent/dir/img", "cannot open", -ENOENT },
		{ "emu:ram:1000", "not a whole number of 512-byte blocks", -EINVAL },
		{ "pci:zz:00.0", "malformed PCI address", -EINVAL },
		{ "pci:0000:ff:1f.7", "no such PCI device", -ENODEV },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct gpunvme_ctrl *c = (struct gpunvme_ctrl *)1;
		int rc = gpunvme_open(t[i].uri, NULL, &c);
		REQUIRE(rc < 0 && c == NULL, "%s: rc %d", t[i].uri, rc);
		REQUIRE(rc == t[i].rc, "%s: rc %d want %d (%s)", t[i].uri, rc, t[i].rc, gpunvme_last_error());
		REQUIRE(strstr(gpunvme_last_error(), t[i].msg), "%s: message \"%s\"", t[i].uri, gpunvme_last_error());
		REQUIRE(gpunvme_last_error()[0], "%s: empty message", t[i].uri);
	}
	return 0;
}

TEST_CASE(media_error)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_MEDIA, .nsid = 1, .slba = 100, .nlb = 1 };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	uint8_t *b = gpunvme_dma_alloc(c, 1 << 20);
	uint16_t st = 0;
	REQUIRE(gpunvme_read_sync(qp, 1, b, 0, 2048, &st) == -EIO);
	REQUIRE_EQ(st, GPUNVME_SC_UNRECOVERED_READ);
	REQUIRE(strstr(gpunvme_last_error(), "Unrecovered Read Error"));
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 101, 100, &st));
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(dropped_command_times_out)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 300);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY, .count = 1 };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	uint64_t t0 = h_now_ms();
	REQUIRE(gpunvme_read_sync(qp, 1, b, 0, 8, NULL) == -ETIMEDOUT);
	uint64_t dt = h_now_ms() - t0;
	REQUIRE(dt >= 250 && dt < 3000, "timed out after %llu ms", (unsigned long long)dt);
	/* the queue keeps working; the dropped command's id stays reserved */
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 0, 8, NULL));
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

struct tmo_wait {
	int err;
	bool done;
	uint64_t at_ms;
};

static void tmo_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct tmo_wait *w = arg;
	w->err = cpl->err;
	w->done = true;
	w->at_ms = h_now_ms();
}

/* A dropped command must time out also on a queue pair that is never idle:
 * here every poll finds the completion of the read submitted before it
 * (found by the soak's analysis: the timeout scan ran only in polls that
 * reaped nothing, so a busy queue pair kept a dropped command forever). */
TEST_CASE(timeout_on_a_busy_queue)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M?idle_us=20", 200);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 16, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	REQUIRE(b);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY, .count = 1 };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	struct tmo_wait dropped = { 0 }, busy = { 0 };
	uint64_t t0 = h_now_ms();
	REQUIRE_OK(gpunvme_read(qp, 1, b, 0, 8, tmo_cb, &dropped));
	unsigned reaping = 0, polls = 0;
	while (!dropped.done && h_now_ms() - t0 < 3000) {
		busy.done = false;
		REQUIRE_OK(gpunvme_read(qp, 1, b, 8, 8, tmo_cb, &busy));
		h_sleep_ms(5); /* the read completes meanwhile */
		int rc = gpunvme_qpair_poll(qp, 0);
		REQUIRE(rc >= 0, "poll: %d", rc);
		polls++;
		reaping += busy.done;
	}
	REQUIRE(dropped.done, "the dropped command did not time out in 3 s (%u of %u polls reaped a completion)",
		reaping, polls);
	CHECK_EQ(dropped.err, -ETIMEDOUT);
	CHECK(dropped.at_ms - t0 >= 190 && dropped.at_ms - t0 < 1000, "timed out after %llu ms",
	      (unsigned long long)(dropped.at_ms - t0));
	uint64_t end = h_now_ms() + 2000;
	while (gpunvme_qpair_outstanding(qp) && h_now_ms() < end)
		gpunvme_qpair_poll(qp, 0);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(cfs_then_reset)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	memset(b, 0x5a, 4096);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, b, 8, 8, NULL));
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_CFS };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	int rc = gpunvme_read_sync(qp, 1, b, 8, 8, NULL);
	REQUIRE(rc == -EIO, "rc %d", rc);
	REQUIRE(strstr(gpunvme_last_error(), "CFS"));
	REQUIRE_OK(gpunvme_reset(c));
	memset(b, 0, 4096);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 8, 8, NULL));
	REQUIRE_EQ(b[4095], 0x5a);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

struct poison_wait {
	uint8_t *buf;
	size_t len;
	int err;
	bool done;
};

/* A caller may reuse a buffer once its command completed, failed or not. */
static void poison_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct poison_wait *p = arg;
	p->err = cpl->err;
	memset(p->buf, 0xa5, p->len);
	p->done = true;
}

/* A reset of a controller that answers deletes its I/O queues first (SQ,
 * then CQ: Linux's order), so the controller ends every command of theirs
 * before CC.EN = 0: here 7 reads held by a DROP fault fill a queue of 8
 * entries. Each ends with -EIO (its callback poisons its buffer), the
 * buffers stay poisoned afterwards and the pages around them untouched.
 * Two admin commands more than the bring-up alone (Set Features, Create
 * CQ, Create SQ); a controller in fatal status gets none of them. */
/* gpunvme_reset, and the admin commands the emulator saw during it */
static int reset_counting(struct gpunvme_ctrl *c, struct gpunvme_emu *emu, uint64_t *n)
{
	struct gpunvme_emu_stats st;
	gpunvme_emu_get_stats(emu, &st);
	const uint64_t before = st.admin_cmds;
	int rc = gpunvme_reset(c);
	gpunvme_emu_get_stats(emu, &st);
	*n = st.admin_cmds - before;
	return rc;
}

TEST_CASE(reset_deletes_queues_first)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 0);
	REQUIRE(c);
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(c);
	struct gpunvme_qpair *qp;
	enum { N = 7 };
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	/* N pages of reads between two guard pages */
	uint8_t *mem = gpunvme_dma_alloc(c, (N + 2) * 4096), *b = mem + 4096;
	REQUIRE(mem);
	memset(mem, 0x5c, (N + 2) * 4096);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY, .count = N };
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	struct poison_wait w[N];
	for (int i = 0; i < N; i++) {
		w[i] = (struct poison_wait){ b + i * 4096, 4096, 0, false };
		REQUIRE_OK(gpunvme_read(qp, 1, w[i].buf, (uint64_t)i, 1, poison_cb, &w[i]));
	}
	uint64_t end = h_now_ms() + 2000;
	struct gpunvme_emu_stats st;
	do
		gpunvme_emu_get_stats(emu, &st);
	while (st.dropped < N && h_now_ms() < end);
	REQUIRE(st.dropped == N, "%llu of %d reads held", (unsigned long long)st.dropped, N);
	uint64_t n = 0;
	REQUIRE_OK(reset_counting(c, emu, &n));
	CHECK(n == 5, "%llu admin commands in the reset (Delete SQ, Delete CQ, then the bring-up's 3)",
	      (unsigned long long)n);
	for (int i = 0; i < N; i++)
		CHECK(w[i].done && w[i].err == -EIO, "read %d: done %d err %d", i, w[i].done, w[i].err);
	usleep(50000);
	for (int i = 0; i < N + 2; i++) {
		const uint8_t want = i == 0 || i == N + 1 ? 0x5c : 0xa5;
		uint32_t o = 0;
		while (o < 4096 && mem[(size_t)i * 4096 + o] == want)
			o++;
		CHECK(o == 4096, "page %d (%s) changed after the reset at byte %u", i,
		      i == 0 || i == N + 1 ? "a guard" : "a failed read's", o);
	}
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 0, 1, NULL));
	/* a GPU queue ID whose queues are gone already (a GPU recovery
	 * deletes its own before it resets): Invalid Queue Identifier for
	 * both, and the queue pair's are still deleted after it */
	uint16_t gq;
	REQUIRE_OK(gpunvme_ctrl_reserve_qid(c, &gq));
	REQUIRE_OK(reset_counting(c, emu, &n));
	CHECK(n == 7, "%llu admin commands in the reset with a queue ID already deleted", (unsigned long long)n);
	gpunvme_ctrl_release_qid(c, gq);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 0, 1, NULL));
	/* fatal status: nothing is asked of it before CC.EN = 0 */
	struct gpunvme_emu_fault cfs = { .kind = GPUNVME_EMU_FAULT_CFS };
	REQUIRE_OK(gpunvme_emu_inject(emu, &cfs));
	REQUIRE_OK(reset_counting(c, emu, &n));
	CHECK(n == 3, "%llu admin commands in the reset of a controller in fatal status", (unsigned long long)n);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 0, 1, NULL));
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* gpunvme_reset fails every outstanding command, and a callback may reuse
 * its buffer at once: the controller must have stopped first (CC.EN = 0,
 * CSTS.RDY = 0), or a read it is still working on lands in a buffer its
 * owner was told is free (found by the soak: a failed read's buffer
 * changed after its completion). Many large reads are outstanding when
 * the reset starts, so the controller is busy with them throughout. */
TEST_CASE(reset_stops_controller_before_failing)
{
	enum { N = 32, LEN = 128 << 10 };
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 64, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, (size_t)N * LEN);
	REQUIRE(b);
	unsigned late = 0, failed = 0;
	for (int a = 0; a < 100; a++) {
		struct poison_wait w[N];
		for (int i = 0; i < N; i++) {
			w[i] = (struct poison_wait){ b + (size_t)i * LEN, LEN, 0, false };
			REQUIRE_OK(gpunvme_read(qp, 1, w[i].buf, (uint64_t)i * (LEN / 512), LEN / 512, poison_cb, &w[i]));
		}
		REQUIRE_OK(gpunvme_reset(c));
		for (int i = 0; i < N; i++) {
			REQUIRE(w[i].done, "attempt %d: read %d did not complete in the reset", a, i);
			failed += w[i].err == -EIO;
		}
		h_sleep_ms(5); /* a late transfer would have landed by now */
		for (int i = 0; i < N; i++)
			late += !h_all(w[i].buf, LEN, 0xa5);
	}
	CHECK_EQ(late, 0);
	printf("%u of %u reads failed by the reset, %u buffers written after their completion\n", failed, 100 * N,
	       late);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

TEST_CASE(surprise_removal)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_REMOVE };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	uint64_t t0 = h_now_ms();
	REQUIRE(gpunvme_read_sync(qp, 1, b, 0, 8, NULL) == -ENODEV);
	REQUIRE(strstr(gpunvme_last_error(), "device gone"));
	REQUIRE(h_now_ms() - t0 < 2000);
	struct gpunvme_sqe cmd = { .opc = GPUNVME_ADM_IDENTIFY };
	cmd.identify.cns = 1;
	uint8_t id[4096];
	REQUIRE(gpunvme_admin(c, &cmd, id, sizeof(id), 0, NULL) == -ENODEV);
	REQUIRE(gpunvme_reset(c) == -ENODEV);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c); /* must not hang */
	return 0;
}

/* Buffers from several allocations, used in turn on one queue pair, in
 * both address orders: the queue pair's cached allocation must never
 * translate a buffer that lies outside it (found by the QEMU suite: a
 * buffer above the cached allocation wrapped the bounds check). */
TEST_CASE(alternating_allocations)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M", 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	uint8_t *a[4];
	for (int i = 0; i < 4; i++) {
		a[i] = gpunvme_dma_alloc(c, 64 << 10);
		REQUIRE(a[i]);
		fill(a[i], 64 << 10, 20 + i);
	}
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 4; i++) {
			int k = round == 1 ? 3 - i : i;
			REQUIRE_OK(gpunvme_write_sync(qp, 1, a[k] + 4096 * round, (uint64_t)k * 1024 + 8 * round, 8, NULL));
			REQUIRE_OK(gpunvme_write_sync(qp, 1, a[k] + 8192, (uint64_t)k * 1024 + 512, 64, NULL));
		}
	uint8_t *r = gpunvme_dma_alloc(c, 64 << 10);
	for (int round = 0; round < 3; round++)
		for (int k = 0; k < 4; k++) {
			REQUIRE_OK(gpunvme_read_sync(qp, 1, r, (uint64_t)k * 1024 + 8 * round, 8, NULL));
			REQUIRE(memcmp(r, a[k] + 4096 * round, 4096) == 0, "round %d buffer %d", round, k);
		}
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* Small DMA allocations share 2 MiB chunks (on UIO each chunk is a
 * hugepage): pages are reused after free, handed out zeroed, and I/O through
 * neighbouring small buffers stays separate. */
TEST_CASE(dma_small_allocations)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M", 0);
	REQUIRE(c);
	uint8_t *p[600];
	for (int i = 0; i < 600; i++) {
		p[i] = gpunvme_dma_alloc(c, 100 + i);
		REQUIRE(p[i]);
		REQUIRE(((uintptr_t)p[i] & 4095) == 0);
		REQUIRE(gpunvme_dma_iova(c, p[i]) != 0);
		for (int k = 0; k < i; k++)
			REQUIRE(p[k] != p[i]);
		memset(p[i], 0xff, 100 + i);
	}
	/* free every other one, allocate again: live allocations never
	 * overlap, and reused pages come back zeroed */
	for (int i = 0; i < 600; i += 2)
		gpunvme_dma_free(c, p[i]);
	for (int i = 0; i < 600; i += 2) {
		p[i] = gpunvme_dma_alloc(c, 4096);
		REQUIRE(p[i]);
		for (int k = 0; k < 4096; k++)
			REQUIRE(p[i][k] == 0);
		for (int k = 1; k < 600; k += 2)
			REQUIRE(p[k] != p[i]);
		memset(p[i], 0xff, 4096);
	}
	uint8_t *again = gpunvme_dma_alloc(c, 8192);
	REQUIRE(again);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	fill(p[10], 512, 5);
	fill(p[11], 512, 6);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, p[10], 0, 1, NULL));
	REQUIRE_OK(gpunvme_write_sync(qp, 1, p[11], 1, 1, NULL));
	REQUIRE_OK(gpunvme_read_sync(qp, 1, again, 0, 2, NULL));
	REQUIRE(memcmp(again, p[10], 512) == 0 && memcmp(again + 512, p[11], 512) == 0);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* Two processes see the same data through a file-backed image. */
TEST_CASE(file_two_processes)
{
	char path[] = "/tmp/gpunvme-test-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	REQUIRE(ftruncate(fd, 8 << 20) == 0);
	close(fd);
	char uri[64];
	snprintf(uri, sizeof(uri), "emu:%s", path);
	pid_t pid = fork();
	if (pid == 0) {
		struct gpunvme_ctrl *c = open_or_null(uri, 0);
		struct gpunvme_qpair *qp;
		if (!c || gpunvme_qpair_create(c, 4, &qp))
			_exit(2);
		uint8_t *b = gpunvme_dma_alloc(c, 1 << 20);
		fill(b, 1 << 20, 9);
		int rc = gpunvme_write_sync(qp, 1, b, 64, 2048, NULL) || gpunvme_flush_sync(qp, 1, NULL);
		gpunvme_qpair_destroy(qp);
		gpunvme_close(c);
		_exit(rc ? 3 : 0);
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct gpunvme_ctrl *c = open_or_null(uri, 0);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 4, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 1 << 20);
	uint8_t *want = malloc(1 << 20);
	fill(want, 1 << 20, 9);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 64, 2048, NULL));
	REQUIRE(memcmp(b, want, 1 << 20) == 0);
	free(want);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	unlink(path);
	return 0;
}
/* The abort step: dropped commands time out, keep their ids, and
 * gpunvme_qpair_abort_expired gets them back without a reset (the
 * emulator honours an Abort of a dropped command). */
TEST_CASE(abort_expired_frees_dropped)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 200);
	REQUIRE(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 4, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4 * 4096);
	REQUIRE(b);
	memset(b, 0x3c, 4096);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, b, 0, 8, NULL));
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_DROP, .sqid = GPUNVME_EMU_SQID_ANY, .count = 2 };
	REQUIRE_OK(gpunvme_emu_inject(gpunvme_ctrl_emu(c), &f));
	struct tmo_wait w[2] = { { 0 }, { 0 } };
	REQUIRE_OK(gpunvme_read(qp, 1, b, 0, 8, tmo_cb, &w[0]));
	REQUIRE_OK(gpunvme_read(qp, 1, b + 4096, 0, 8, tmo_cb, &w[1]));
	uint64_t end = h_now_ms() + 3000;
	while (!(w[0].done && w[1].done) && h_now_ms() < end)
		REQUIRE(gpunvme_qpair_poll(qp, 0) >= 0);
	REQUIRE(w[0].done && w[1].done, "the dropped commands did not time out");
	CHECK_EQ(w[0].err, -ETIMEDOUT);
	CHECK_EQ(w[1].err, -ETIMEDOUT);
	/* 2 of the 3 usable ids are held by the timed-out commands */
	REQUIRE_EQ(gpunvme_qpair_abort_expired(qp), 0);
	/* every id is back: three reads at once (depth 4 keeps one slot free) */
	struct tmo_wait r[3] = { { 0 }, { 0 }, { 0 } };
	for (int i = 0; i < 3; i++)
		REQUIRE_OK(gpunvme_read(qp, 1, b + i * 4096, 0, 8, tmo_cb, &r[i]));
	end = h_now_ms() + 3000;
	while (!(r[0].done && r[1].done && r[2].done) && h_now_ms() < end)
		REQUIRE(gpunvme_qpair_poll(qp, 0) >= 0);
	for (int i = 0; i < 3; i++) {
		REQUIRE(r[i].done && r[i].err == 0, "read %d after the abort step: done %d err %d", i, r[i].done, r[i].err);
		REQUIRE_EQ(b[i * 4096 + 4095], 0x3c);
	}
	REQUIRE_EQ(gpunvme_qpair_abort_expired(qp), 0); /* nothing to do is no error */
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* Queues in memory the caller provides (gpunvme_qpair_create_in: Tier 3
 * placement on the kmod: bus, any DMA memory here) carry I/O like queues
 * the driver allocates, and stay the caller's after destroy. */
TEST_CASE(qpair_rings_in_caller_memory)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M", 0);
	REQUIRE(c);
	uint8_t *rings = gpunvme_dma_alloc(c, 64 << 10);
	uint8_t *buf = gpunvme_dma_alloc(c, 256 << 10), *back = gpunvme_dma_alloc(c, 256 << 10);
	REQUIRE(rings && buf && back);
	struct gpunvme_qpair *qp = NULL;
	REQUIRE_OK(gpunvme_qpair_create_in(c, 32, rings, 64 << 10, &qp));
	for (int round = 0; round < 4; round++) { /* several laps of the 32-entry rings */
		fill(buf, 256 << 10, (uint32_t)round + 7);
		for (int k = 0; k < 20; k++) {
			REQUIRE_OK(gpunvme_write_sync(qp, 1, buf, (uint64_t)k * 512, 512, NULL));
			REQUIRE_OK(gpunvme_read_sync(qp, 1, back, (uint64_t)k * 512, 512, NULL));
			REQUIRE(memcmp(buf, back, 256 << 10) == 0);
		}
	}
	gpunvme_qpair_destroy(qp);
	memset(rings, 0x11, 64 << 10); /* still the caller's memory */
	/* bad placements */
	REQUIRE_EQ(gpunvme_qpair_create_in(c, 32, NULL, 0, &qp), -EINVAL);
	REQUIRE_EQ(gpunvme_qpair_create_in(c, 32, rings + 64, 8192, &qp), -EINVAL);
	CHECK_LAST_ERROR("4 KiB aligned");
	REQUIRE_EQ(gpunvme_qpair_create_in(c, 1024, rings, 64 << 10, &qp), -EINVAL);
	CHECK_LAST_ERROR("needs");
	static uint8_t plain[64 << 10] __attribute__((aligned(4096)));
	REQUIRE_EQ(gpunvme_qpair_create_in(c, 32, plain, sizeof(plain), &qp), -EINVAL);
	CHECK_LAST_ERROR("gpunvme_dma_import");
	gpunvme_dma_free(c, rings);
	gpunvme_dma_free(c, buf);
	gpunvme_dma_free(c, back);
	gpunvme_close(c);
	return 0;
}

/* A slow device (SLOW fault): commands time out; once it answers again the
 * late completions give the ids back; the abort step reports 0 left. */
TEST_CASE(slow_device_times_out_then_answers)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 100);
	REQUIRE(c);
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(c);
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_SLOW, .latency_us = 0 };
	REQUIRE_EQ(gpunvme_emu_inject(emu, &f), -EINVAL);
	f.latency_us = 10000001;
	REQUIRE_EQ(gpunvme_emu_inject(emu, &f), -EINVAL);
	f.latency_us = 300000;
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	uint64_t t0 = h_now_ms();
	int rc = gpunvme_read_sync(qp, 1, b, 0, 1, NULL);
	REQUIRE(rc == -ETIMEDOUT, "read on a slow device: %d, want -ETIMEDOUT", rc);
	CHECK(h_now_ms() - t0 < 1000, "took %llu ms", (unsigned long long)(h_now_ms() - t0));
	gpunvme_emu_clear_faults(emu);
	REQUIRE_EQ(gpunvme_qpair_abort_expired(qp), 0);
	t0 = h_now_ms();
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 0, 1, NULL));
	CHECK(h_now_ms() - t0 < 100, "read after the slow fault took %llu ms", (unsigned long long)(h_now_ms() - t0));
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* Surprise removal, then the device comes back (RETURN): commands fail
 * with -ENODEV while it is gone, gpunvme_reset brings it up again, data
 * written before is there. */
TEST_CASE(remove_and_return)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:4M", 0);
	REQUIRE(c);
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(c);
	struct gpunvme_emu_fault f = { .kind = GPUNVME_EMU_FAULT_RETURN };
	REQUIRE_EQ(gpunvme_emu_inject(emu, &f), -EINVAL); /* not removed */
	struct gpunvme_qpair *qp;
	REQUIRE_OK(gpunvme_qpair_create(c, 8, &qp));
	uint8_t *b = gpunvme_dma_alloc(c, 4096);
	memset(b, 0x6e, 4096);
	REQUIRE_OK(gpunvme_write_sync(qp, 1, b, 16, 8, NULL));
	f.kind = GPUNVME_EMU_FAULT_REMOVE;
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	REQUIRE_EQ(gpunvme_read_sync(qp, 1, b, 16, 8, NULL), -ENODEV);
	REQUIRE_EQ(gpunvme_reset(c), -ENODEV);
	REQUIRE_EQ(gpunvme_qpair_abort_expired(qp), -ENODEV);
	f.kind = GPUNVME_EMU_FAULT_RETURN;
	REQUIRE_OK(gpunvme_emu_inject(emu, &f));
	REQUIRE_OK(gpunvme_reset(c));
	memset(b, 0, 4096);
	REQUIRE_OK(gpunvme_read_sync(qp, 1, b, 16, 8, NULL));
	REQUIRE_EQ(b[0], 0x6e);
	REQUIRE_EQ(b[4095], 0x6e);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return 0;
}

/* Foreign memory (dma-buf, peer BAR) is the kmod: bus's; others say so. */
TEST_CASE(dma_import_needs_kmod)
{
	struct gpunvme_ctrl *c = open_or_null("emu:ram:16M", 0);
	REQUIRE(c);
	static uint8_t mem[8192] __attribute__((aligned(4096)));
	struct gpunvme_dma_src src = { .kind = GPUNVME_DMA_SRC_DMABUF, .fd = 0 };
	REQUIRE_EQ(gpunvme_dma_import(c, mem, sizeof(mem), &src), -EOPNOTSUPP);
	CHECK_LAST_ERROR("scripts/kmod-bind.sh");
	REQUIRE_EQ(gpunvme_dma_import(c, mem, sizeof(mem), NULL), -EINVAL);
	REQUIRE_EQ(gpunvme_dma_import(NULL, mem, sizeof(mem), &src), -EINVAL);
	gpunvme_close(c);
	return 0;
}

int main(int argc, char **argv) { return check_main(argc, argv); }
