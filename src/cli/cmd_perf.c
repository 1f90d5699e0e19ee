/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme perf: an I/O benchmark in the manner of SPDK's perf.
 *
 * Threading: one POSIX thread per queue pair (--queues N gives N threads,
 * N queue pairs); each thread keeps DEPTH requests of BYTES in flight on
 * its own queue pair, polling it without locks. Requests larger than MDTS
 * are split by the library and count as one I/O here.
 *
 * Latency: submission to callback, per I/O, collected into a log-linear
 * histogram (64 linear sub-buckets per power of two: < 1.6 % error) per
 * thread and operation, merged at the end; min/max/mean are exact.
 *
 * --gpu: the same workloads from GPU threads (perf_gpu.cu) on GPU
 * queue pairs; the per-queue histograms come back from the GPU in the same
 * layout and are reported by the same code.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/tier.h"
#include "util.h"

#include "perf_hist.h"
#ifdef GPUNVME_HAVE_CUDA
#include "perf_gpu.h"
#endif

/* ---- histogram (struct gpunvme_perf_hist: the layout --gpu reports in too) ---- */

/* value range of a bucket: [lo, hi] */
static void h_range(unsigned idx, uint64_t *lo, uint64_t *hi)
{
	if (idx < 2 * GPUNVME_PERF_HSUB) {
		*lo = *hi = idx;
		return;
	}
	unsigned shift = idx / GPUNVME_PERF_HSUB - 1;
	uint64_t mant = idx % GPUNVME_PERF_HSUB + GPUNVME_PERF_HSUB;
	*lo = mant << shift;
	*hi = ((mant + 1) << shift) - 1;
}

static inline void h_add(struct gpunvme_perf_hist *h, uint64_t v)
{
	if (h->count == 0 || v < h->min)
		h->min = v;
	if (v > h->max)
		h->max = v;
	h->count++;
	h->sum += v;
	h->b[gpunvme_perf_hist_index(v)]++;
}

static void h_merge(struct gpunvme_perf_hist *dst, const struct gpunvme_perf_hist *src)
{
	if (!src->count)
		return;
	if (dst->count == 0 || src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	dst->sum += src->sum;
	for (unsigned i = 0; i < GPUNVME_PERF_HBUCKETS; i++)
		dst->b[i] += src->b[i];
}

/* p in [0, 100]: midpoint of the bucket holding the p-th percentile */
static uint64_t h_pct(const struct gpunvme_perf_hist *h, double p)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->count);
	if (rank < 1)
		rank = 1;
	uint64_t acc = 0;
	for (unsigned i = 0; i < GPUNVME_PERF_HBUCKETS; i++) {
		acc += h->b[i];
		if (acc >= rank) {
			uint64_t lo, hi;
			h_range(i, &lo, &hi);
			uint64_t v = lo + (hi - lo) / 2;
			if (v < h->min)
				v = h->min;
			if (v > h->max)
				v = h->max;
			return v;
		}
	}
	return h->max;
}

/* ---- workload ------------------------------------------------------------------ */

enum wl { WL_READ, WL_RANDREAD, WL_WRITE, WL_RANDWRITE, WL_RW, WL_RANDRW };

/* long-only options */
enum { OPT_GPU = 0x100, OPT_GPU_MODE, OPT_TIER };
static const char *wl_names[] = {"read", "randread", "write", "randwrite", "rw", "randrw"};

struct perf;

struct io {
	struct worker *w;
	uint8_t *buf;
	uint64_t start;
	bool is_read;
	bool done;
	int err;
	uint16_t status;
};

struct worker {
	struct perf *p;
	unsigned idx;
	pthread_t tid;
	struct gpunvme_qpair *qp;
	uint8_t *dma;
	struct io *ios;
	uint32_t *ready;     /* indexes of completed ios */
	uint32_t nready;
	uint64_t rng;
	uint64_t seq_next, seq_lo, seq_hi;  /* in units of I/Os */
	struct gpunvme_perf_hist hr, hw;
	uint64_t errors;
	uint64_t last_done_ns;   /* when a poll last completed something (tcp: spin, then wait) */
	int first_err;
	uint16_t first_status;
	int fatal;           /* poll failed */
	char fatal_msg[256];
	uint64_t elapsed_ns;
	bool drained;
};

struct perf {
	const char *uri;
	uint32_t nsid;
	enum wl wl;
	uint32_t depth, queues, mix;
	uint64_t bytes, blocks_per_io, nios;
	double seconds;
	struct gpunvme_ns_info ni;
	uint32_t io_timeout_ms;
	atomic_int go;
	atomic_int stop;
	uint64_t t_start, t_end;
};

static void io_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct io *io = arg;
	struct worker *w = io->w;
	uint64_t now = cli_now_ns();
	io->err = cpl->err;
	io->status = cpl->status;
	io->done = true;
	if (cpl->err) {
		if (!w->errors++) {
			w->first_err = cpl->err;
			w->first_status = cpl->status;
		}
	} else if (now <= w->p->t_end) {
		h_add(io->is_read ? &w->hr : &w->hw, now - io->start);
	}
	w->ready[w->nready++] = (uint32_t)(io - w->ios);
}

static int submit(struct worker *w, struct io *io)
{
	struct perf *p = w->p;
	uint64_t r = gpunvme_perf_rnd(&w->rng);
	uint64_t n;
	bool random = p->wl == WL_RANDREAD || p->wl == WL_RANDWRITE || p->wl == WL_RANDRW;
	if (random) {
		n = r % p->nios;
	} else {
		n = w->seq_next++;
		if (w->seq_next >= w->seq_hi)
			w->seq_next = w->seq_lo;
	}
	switch (p->wl) {
	case WL_READ: case WL_RANDREAD: io->is_read = true; break;
	case WL_WRITE: case WL_RANDWRITE: io->is_read = false; break;
	default: io->is_read = (gpunvme_perf_rnd(&w->rng) % 100) < p->mix; break;
	}
	io->done = false;
	io->start = cli_now_ns();
	uint64_t slba = n * p->blocks_per_io;
	return io->is_read ? gpunvme_read(w->qp, p->nsid, io->buf, slba, p->blocks_per_io, io_cb, io)
			   : gpunvme_write(w->qp, p->nsid, io->buf, slba, p->blocks_per_io, io_cb, io);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct perf *p = w->p;
	while (!atomic_load(&p->go))
		;
	int rc = 0;
	for (uint32_t i = 0; i < p->depth && !rc; i++)
		rc = submit(w, &w->ios[i]);
	if (rc) {
		w->fatal = rc;
		snprintf(w->fatal_msg, sizeof(w->fatal_msg), "submitting on queue pair %u: %s", w->idx,
			 gpunvme_last_error());
		atomic_store(&p->stop, 1);
	}
	uint64_t now = cli_now_ns();
	w->last_done_ns = now;
	while (!w->fatal) {
		int n = gpunvme_qpair_poll(w->qp, 0);
		if (n < 0) {
			w->fatal = n;
			snprintf(w->fatal_msg, sizeof(w->fatal_msg), "queue pair %u: %s", w->idx,
				 gpunvme_last_error()[0] ? gpunvme_last_error() : strerror(-n));
			atomic_store(&p->stop, 1);
			break;
		}
		/* nothing completed for 200 us: over NVMe/TCP sleep until data
		 * comes (at most 1 ms) instead of spinning on; a no-op on PCIe.
		 * Spinning first keeps a wake-up out of short waits (QD1). */
		if (n > 0)
			w->last_done_ns = cli_now_ns();
		else if (!w->nready && cli_now_ns() - w->last_done_ns > 200000)
			gpunvme_qpair_wait(w->qp, 1000);
		now = cli_now_ns();
		if (now >= p->t_end || atomic_load_explicit(&p->stop, memory_order_relaxed))
			break;
		if (w->errors) {
			atomic_store(&p->stop, 1);
			break;
		}
		while (w->nready) {
			struct io *io = &w->ios[w->ready[--w->nready]];
			if ((rc = submit(w, io))) {
				w->fatal = rc;
				snprintf(w->fatal_msg, sizeof(w->fatal_msg), "submitting on queue pair %u: %s",
					 w->idx, gpunvme_last_error());
				atomic_store(&p->stop, 1);
				break;
			}
		}
	}
	w->elapsed_ns = (now < p->t_end ? now : p->t_end) - p->t_start;
	/* drain: completions after the end are not counted */
	uint64_t t0 = cli_now_ns();
	uint64_t limit = (uint64_t)p->io_timeout_ms * 1000000ull + 2000000000ull;
	while (gpunvme_qpair_outstanding(w->qp) > 0 && cli_now_ns() - t0 < limit)
		if (gpunvme_qpair_poll(w->qp, 0) < 0)
			break;
	w->drained = gpunvme_qpair_outstanding(w->qp) == 0;
	return NULL;
}

/* ---- options ------------------------------------------------------------------- */

static void help(void)
{
	printf("usage: gpunvme perf URI -q DEPTH -o BYTES -w WORKLOAD -t SECONDS [options]\n"
	       "\n"
	       "I/O benchmark in the manner of SPDK perf. One thread per queue pair; each keeps\n"
	       "DEPTH I/Os of BYTES in flight. Random offsets are aligned to BYTES and uniform\n"
	       "over the namespace; sequential workloads give each queue pair its own slice\n"
	       "of the namespace and wrap around in it. Prints IOPS, GB/s and latency\n"
	       "(average, p50, p99, max) from a log-linear histogram.\n"
	       "\n"
	       "  -q, --depth N        I/Os in flight per queue pair (1 .. queue entries - 1)\n"
	       "  -o, --size BYTES     bytes per I/O, a multiple of the LBA size (K/M suffixes)\n"
	       "  -w, --workload W     read, randread, write, randwrite, rw, randrw\n"
	       "  -t, --time SECONDS   run time (decimals allowed, e.g. 0.5)\n"
	       "  -Q, --queues N       queue pairs = threads (default 1)\n"
	       "  -M, --mix PCT        rw/randrw: percentage of reads (default 50)\n"
	       "  -n, --nsid N         namespace (default 1)\n"
	       "      --timeout MS     per-command timeout (default 30000)\n"
	       "  -j, --json           JSON output\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "GPU-initiated I/O (needs an NVIDIA GPU and a build with CUDA):\n"
	       "      --gpu            GPU threads build the commands, ring the doorbells and\n"
	       "                       poll the completions on N GPU queue pairs; latency is\n"
	       "                       measured on the GPU (%%globaltimer)\n"
	       "      --gpu-mode M     warp (default): warp batches of 32 commands, latency per\n"
	       "                       batch; thread: every I/O its own warp, resubmitted as\n"
	       "                       soon as it completes, latency per I/O\n"
	       "      --tier 1|2       data buffers in pinned host memory (1, default) or in\n"
	       "                       GPU memory (2)\n"
	       "\n"
	       "write workloads overwrite the namespace.\n"
	       "\n"
	       "example: gpunvme perf 'emu:null:16G?workers=2' -q 64 -o 4K -w randread -t 5 --queues 2\n"
	       "         gpunvme perf 'emu:null:16G?workers=4&nsq=8' -q 256 -o 4K -w randread -t 5 --queues 8 --gpu\n");
}

static int parse_seconds(const char *s, double *out)
{
	const char *p = s;
	double v = 0;
	bool digits = false;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		digits = true;
		if (v > 1e9)
			return -ERANGE;
	}
	if (*p == '.') {
		double f = 0.1;
		p++;
		while (*p >= '0' && *p <= '9') {
			v += (*p++ - '0') * f;
			f /= 10;
			digits = true;
		}
	}
	if (!digits || *p)
		return -EINVAL;
	*out = v;
	return 0;
}

static void lat_json(struct cli_json *j, const char *key, const struct gpunvme_perf_hist *h)
{
	cj_obj_begin(j, key);
	cj_dbl(j, "min", h->count ? h->min / 1e3 : 0);
	cj_dbl(j, "avg", h->count ? (double)h->sum / (double)h->count / 1e3 : 0);
	cj_dbl(j, "p50", h_pct(h, 50) / 1e3);
	cj_dbl(j, "p99", h_pct(h, 99) / 1e3);
	cj_dbl(j, "p999", h_pct(h, 99.9) / 1e3);
	cj_dbl(j, "max", h->max / 1e3);
	cj_obj_end(j);
}

static void stats_json(struct cli_json *j, const char *key, const struct gpunvme_perf_hist *h, double secs, uint64_t bytes)
{
	cj_obj_begin(j, key);
	cj_u64(j, "ios", h->count);
	cj_dbl(j, "iops", secs > 0 ? (double)h->count / secs : 0);
	cj_dbl(j, "gb_per_s", secs > 0 ? (double)h->count * (double)bytes / secs / 1e9 : 0);
	cj_dbl(j, "mib_per_s", secs > 0 ? (double)h->count * (double)bytes / secs / 1048576.0 : 0);
	lat_json(j, "latency_us", h);
	cj_obj_end(j);
}

static void stats_line(const char *name, const struct gpunvme_perf_hist *h, double secs, uint64_t bytes)
{
	double iops = secs > 0 ? (double)h->count / secs : 0;
	/* GB/s (10^9 bytes), as `load`, read/write and SSD datasheets quote;
	 * IOPS as a whole number */
	printf("%-22s %12.0f %10.3f %10.2f %10.2f %10.2f %10.2f\n", name, iops, iops * (double)bytes / 1e9,
	       h->count ? (double)h->sum / (double)h->count / 1e3 : 0.0, h_pct(h, 50) / 1e3, h_pct(h, 99) / 1e3,
	       h->max / 1e3);
}

/* What the GPU path adds to the report (NULL for the CPU path). */
struct gpu_info {
	const char *name;
	const char *mode;      /* "warp" or "thread" */
	const char *threading; /* one line */
	const char *latency;   /* what the latency measures */
	uint32_t tier;
	uint32_t threads, blocks, threads_per_block, queue_entries, cmds_per_io;
	double kernel_s;
	uint64_t late;
};

static const char *tier_text(uint32_t tier)
{
	return tier == 2 ? "Tier 2: data buffers in GPU memory" : "Tier 1: data buffers in pinned host memory";
}

/* The queues' results merged (on the heap: a histogram is large). */
struct totals {
	struct gpunvme_perf_hist *r, *w, *t; /* reads, writes, both */
	struct gpunvme_perf_hist *q;         /* scratch: one queue's reads and writes */
	uint64_t errors;
	double secs;                         /* the longest queue's run time */
};

/* queue i's reads and writes, merged into t->q */
static const struct gpunvme_perf_hist *queue_hist(struct totals *t, const struct worker *ws, uint32_t i)
{
	memset(t->q, 0, sizeof(*t->q));
	h_merge(t->q, &ws[i].hr);
	h_merge(t->q, &ws[i].hw);
	return t->q;
}

static void report_json(const struct perf *p, const struct worker *ws, uint32_t nw, const struct gpu_info *gi,
			struct totals *t)
{
	double secs = t->secs;
	bool mixed = p->wl == WL_RW || p->wl == WL_RANDRW;
	bool reads_only = p->wl == WL_READ || p->wl == WL_RANDREAD;
	struct cli_json j;
	cj_init(&j, stdout);
	cj_obj_begin(&j, NULL);
	cj_str(&j, "uri", p->uri);
	cj_u64(&j, "nsid", p->nsid);
	cj_str(&j, "workload", wl_names[p->wl]);
	cj_u64(&j, "io_size", p->bytes);
	cj_u64(&j, "depth", p->depth);
	cj_u64(&j, "queues", p->queues);
	cj_str(&j, "threading", gi ? gi->threading : "one thread per queue pair");
	if (mixed)
		cj_u64(&j, "read_pct", p->mix);
	cj_dbl(&j, "seconds", p->seconds);
	cj_dbl(&j, "elapsed_s", secs);
	cj_u64(&j, "errors", t->errors);
	if (gi) {
		cj_obj_begin(&j, "gpu");
		cj_str(&j, "name", gi->name);
		cj_str(&j, "mode", gi->mode);
		cj_u64(&j, "tier", gi->tier);
		cj_u64(&j, "threads", gi->threads);
		cj_u64(&j, "blocks", gi->blocks);
		cj_u64(&j, "threads_per_block", gi->threads_per_block);
		cj_u64(&j, "queue_entries", gi->queue_entries);
		cj_u64(&j, "commands_per_io", gi->cmds_per_io);
		cj_dbl(&j, "kernel_s", gi->kernel_s);
		cj_u64(&j, "late_ios", gi->late);
		cj_str(&j, "latency", gi->latency);
		cj_obj_end(&j);
	}
	stats_json(&j, "total", t->t, secs, p->bytes);
	if (t->r->count || reads_only || mixed)
		stats_json(&j, "read", t->r, secs, p->bytes);
	if (t->w->count || !reads_only)
		stats_json(&j, "write", t->w, secs, p->bytes);
	cj_arr_begin(&j, "per_queue");
	for (uint32_t i = 0; i < nw; i++) {
		const struct gpunvme_perf_hist *wq = queue_hist(t, ws, i);
		cj_obj_begin(&j, NULL);
		cj_u64(&j, "queue", i);
		cj_u64(&j, "ios", wq->count);
		cj_dbl(&j, "iops", secs > 0 ? (double)wq->count / secs : 0);
		cj_dbl(&j, "gb_per_s", secs > 0 ? (double)wq->count * (double)p->bytes / secs / 1e9 : 0);
		cj_dbl(&j, "mib_per_s", secs > 0 ? (double)wq->count * (double)p->bytes / secs / 1048576.0 : 0);
		lat_json(&j, "latency_us", wq);
		cj_obj_end(&j);
	}
	cj_arr_end(&j);
	cj_obj_end(&j);
	cj_finish(&j);
}

static void report_text(const struct perf *p, const struct worker *ws, uint32_t nw, const struct gpu_info *gi,
			struct totals *t)
{
	char h2[32];
	double secs = t->secs;
	bool mixed = p->wl == WL_RW || p->wl == WL_RANDRW;
	printf("gpunvme perf: %s nsid %u, %s", p->uri, p->nsid, wl_names[p->wl]);
	if (mixed)
		printf(" (%u%% reads)", p->mix);
	if (gi)
		printf(", %s I/Os, depth %u, %u GPU queue pair%s, %.2f s\n"
		       "GPU: %s; %s; %u threads (%u blocks of %u); %u entries per queue pair; %s\n",
		       cli_human_bytes(p->bytes, h2, sizeof(h2)), p->depth, p->queues, p->queues > 1 ? "s" : "",
		       secs, gi->name, gi->threading, gi->threads, gi->blocks, gi->threads_per_block,
		       gi->queue_entries, tier_text(gi->tier));
	else
		printf(", %s I/Os, depth %u, %u queue pair%s (one thread each), %.2f s\n",
		       cli_human_bytes(p->bytes, h2, sizeof(h2)), p->depth, p->queues, p->queues > 1 ? "s" : "",
		       secs);
	printf("%-22s %12s %10s %10s %10s %10s %10s\n", "", "IOPS", "GB/s", "avg(us)", "p50(us)", "p99(us)",
	       "max(us)");
	for (uint32_t i = 0; i < nw && nw > 1; i++) {
		char name[32];
		snprintf(name, sizeof(name), "queue %u", i);
		stats_line(name, queue_hist(t, ws, i), secs, p->bytes);
	}
	if (mixed) {
		stats_line("read", t->r, secs, p->bytes);
		stats_line("write", t->w, secs, p->bytes);
	}
	stats_line("total", t->t, secs, p->bytes);
	if (gi)
		printf("latency: %s\n", gi->latency);
}

/* Merge the per-queue histograms and print the results. 0 or -ENOMEM. */
static int report(const struct perf *p, struct worker *ws, uint32_t nw, bool json, const struct gpu_info *gi)
{
	const size_t hs = sizeof(struct gpunvme_perf_hist);
	struct totals t = { .r = calloc(1, hs), .w = calloc(1, hs), .t = calloc(1, hs), .q = calloc(1, hs) };
	if (!t.r || !t.w || !t.t || !t.q) {
		free(t.r); free(t.w); free(t.t); free(t.q);
		return -ENOMEM;
	}
	uint64_t max_el = 0;
	for (uint32_t i = 0; i < nw; i++) {
		h_merge(t.r, &ws[i].hr);
		h_merge(t.w, &ws[i].hw);
		t.errors += ws[i].errors;
		if (ws[i].elapsed_ns > max_el)
			max_el = ws[i].elapsed_ns;
	}
	h_merge(t.t, t.r);
	h_merge(t.t, t.w);
	t.secs = (double)max_el / 1e9;
	if (json)
		report_json(p, ws, nw, gi, &t);
	else
		report_text(p, ws, nw, gi, &t);
	free(t.r); free(t.w); free(t.t); free(t.q);
	return 0;
}

#ifdef GPUNVME_HAVE_CUDA
/* The --gpu run: the workload engine in perf_gpu.cu, then the same
 * report as the CPU path. Sets *stuck when the kernel never ended (then
 * the controller must not be closed under it). */
static int run_gpu(struct perf *p, struct gpunvme_ctrl *ctrl, uint32_t tier, uint32_t mode, bool json, bool *stuck)
{
	struct perf_gpu_args a;
	memset(&a, 0, sizeof(a));
	a.nsid = p->nsid;
	a.workload = (uint32_t)p->wl;
	a.mix = p->mix;
	a.mode = mode;
	a.tier = tier;
	a.queues = p->queues;
	a.depth = p->depth;
	a.io_bytes = p->bytes;
	a.run_ns = (uint64_t)(p->seconds * 1e9);
	if (a.run_ns == 0)
		a.run_ns = 1;
	a.timeout_ns = (uint64_t)p->io_timeout_ms * 1000000ull;
	a.seed = 0x9E3779B97F4A7C15ull ^ cli_now_ns();
	struct perf_gpu_result r;
	int e = perf_gpu_run(ctrl, &a, &r);
	if (e) {
		*stuck = r.stuck != 0;
		perf_gpu_result_free(&r);
		return cli_err(EXIT_RUNTIME, "--gpu: %s", perf_gpu_error());
	}
	struct worker *ws = calloc(p->queues, sizeof(*ws));
	if (!ws) {
		perf_gpu_result_free(&r);
		return cli_err(EXIT_RUNTIME, "out of memory");
	}
	for (uint32_t i = 0; i < p->queues; i++) {
		ws[i].hr = r.hist[2 * i];
		ws[i].hw = r.hist[2 * i + 1];
		ws[i].elapsed_ns = (uint64_t)(r.elapsed_s * 1e9);
	}
	if (r.first_queue < p->queues)
		ws[r.first_queue].errors = r.errors;
	else
		ws[0].errors = r.errors;
	struct gpu_info gi;
	memset(&gi, 0, sizeof(gi));
	gi.name = r.gpu_name;
	gi.mode = mode == PERF_GPU_THREAD ? "thread" : "warp";
	gi.threading = mode == PERF_GPU_THREAD
			       ? "GPU threads: one warp per I/O slot submits, waits and resubmits on its own "
				 "(gpunvme_dev_submit/wait)"
			       : "GPU warp batches: 32 commands per submission, the warp waits for all "
				 "(gpunvme_dev_rw_lanes)";
	gi.latency = mode == PERF_GPU_THREAD
			     ? "GPU %globaltimer, submission to the I/O's completion, per I/O"
			     : "GPU %globaltimer, submission of the warp batch to its last completion "
			       "(every I/O of a batch gets the batch's time)";
	gi.tier = tier;
	gi.threads = r.threads;
	gi.blocks = r.blocks;
	gi.threads_per_block = r.threads_per_block;
	gi.queue_entries = r.queue_entries;
	gi.cmds_per_io = r.cmds_per_io;
	gi.kernel_s = r.kernel_s;
	gi.late = r.late;
	int rc = report(p, ws, p->queues, json, &gi);
	if (rc)
		rc = cli_err(EXIT_RUNTIME, "out of memory");
	else if (r.errors) {
		char why[256];
		rc = cli_err(EXIT_RUNTIME, "%" PRIu64 " I/O error(s) on the GPU; first (queue pair %u): %s", r.errors,
			     r.first_queue, perf_gpu_strerror(r.first_err, p->io_timeout_ms, why, sizeof(why)));
	}
	free(ws);
	perf_gpu_result_free(&r);
	return rc;
}
#endif

/* The command line beyond struct perf. */
struct perf_opts {
	bool help, json, gpu;
	uint32_t timeout_ms;
	uint32_t tier;     /* --gpu: data buffers in pinned host (1) or GPU (2) memory */
	uint32_t gpu_mode; /* --gpu: 0 warp, 1 thread (perf_gpu.h enum) */
};

static int opt_workload(const char *arg, enum wl *out)
{
	int k = -1;
	for (int i = 0; i < 6; i++)
		if (!strcmp(arg, wl_names[i]))
			k = i;
	if (k < 0)
		return cli_usage_err("-w/--workload '%s': expected read, randread, write, randwrite, "
				     "rw or randrw",
				     arg);
	*out = (enum wl)k;
	return 0;
}

static int opt_seconds(const char *arg, double *out)
{
	int e = parse_seconds(arg, out);
	if (e == -ERANGE)
		return cli_usage_err("-t/--time '%s': too long", arg);
	if (e)
		return cli_usage_err("-t/--time '%s': not a number of seconds", arg);
	if (!(*out > 0))
		return cli_usage_err("-t/--time '%s': must be more than 0", arg);
	if (*out > 86400 * 365.0)
		return cli_usage_err("-t/--time '%s': too long", arg);
	return 0;
}

static int parse_opts(int argc, char **argv, struct perf *p, struct perf_opts *o)
{
	static const struct option lo[] = {
		{"depth", required_argument, NULL, 'q'},
		{"size", required_argument, NULL, 'o'},
		{"io-size", required_argument, NULL, 'o'},
		{"workload", required_argument, NULL, 'w'},
		{"time", required_argument, NULL, 't'},
		{"queues", required_argument, NULL, 'Q'},
		{"mix", required_argument, NULL, 'M'},
		{"nsid", required_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 'T'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{"gpu", no_argument, NULL, OPT_GPU},
		{"gpu-mode", required_argument, NULL, OPT_GPU_MODE},
		{"tier", required_argument, NULL, OPT_TIER},
		{0, 0, 0, 0},
	};
	memset(p, 0, sizeof(*p));
	p->nsid = 1;
	p->queues = 1;
	p->mix = 50;
	memset(o, 0, sizeof(*o));
	o->tier = 1;
	bool have_q = false, have_o = false, have_w = false, have_t = false, have_mix = false;
	bool have_tier = false, have_mode = false;
	int c, rc;
	while ((c = cli_getopt(argc, argv, "q:o:w:t:Q:M:n:jh", lo)) != -1) {
		switch (c) {
		case 'q':
			if ((rc = cli_opt_u32("-q/--depth", optarg, false, 1, 65535, &p->depth)))
				return rc;
			have_q = true;
			break;
		case 'o':
			if ((rc = cli_opt_u64("-o/--size", optarg, true, 1, 1ull << 30, &p->bytes)))
				return rc;
			have_o = true;
			break;
		case 'w':
			if ((rc = opt_workload(optarg, &p->wl)))
				return rc;
			have_w = true;
			break;
		case 't':
			if ((rc = opt_seconds(optarg, &p->seconds)))
				return rc;
			have_t = true;
			break;
		case 'Q':
			if ((rc = cli_opt_u32("--queues", optarg, false, 1, 65535, &p->queues)))
				return rc;
			break;
		case 'M':
			if ((rc = cli_opt_u32("--mix", optarg, false, 0, 100, &p->mix)))
				return rc;
			have_mix = true;
			break;
		case 'n':
			if ((rc = cli_opt_u32("--nsid", optarg, false, 1, 0xfffffffe, &p->nsid)))
				return rc;
			break;
		case 'T':
			if ((rc = cli_opt_u32("--timeout", optarg, false, 1, 3600000, &o->timeout_ms)))
				return rc;
			break;
		case 'j': o->json = true; break;
		case 'h': help(); o->help = true; return 0;
		case OPT_GPU: o->gpu = true; break;
		case OPT_TIER:
			if ((rc = cli_opt_u32("--tier", optarg, false, 1, 2, &o->tier)))
				return rc;
			have_tier = true;
			break;
		case OPT_GPU_MODE:
			if (!strcmp(optarg, "warp"))
				o->gpu_mode = 0;
			else if (!strcmp(optarg, "thread"))
				o->gpu_mode = 1;
			else
				return cli_usage_err("--gpu-mode '%s': expected warp or thread", optarg);
			have_mode = true;
			break;
		default: return EXIT_USAGE;
		}
	}
	p->uri = cli_one_uri(argc, argv);
	if (!p->uri)
		return EXIT_USAGE;
	if (!have_q)
		return cli_usage_err("missing -q DEPTH (I/Os in flight per queue pair)");
	if (!have_o)
		return cli_usage_err("missing -o BYTES (I/O size)");
	if (!have_w)
		return cli_usage_err("missing -w WORKLOAD (read, randread, write, randwrite, rw, randrw)");
	if (!have_t)
		return cli_usage_err("missing -t SECONDS (run time)");
	if (have_mix && p->wl != WL_RW && p->wl != WL_RANDRW)
		return cli_usage_err("--mix applies to -w rw and randrw only");
	if (!o->gpu && (have_tier || have_mode))
		return cli_usage_err("%s applies with --gpu only", have_tier ? "--tier" : "--gpu-mode");
	return 0;
}

/* The options against the namespace and the controller's limits, before
 * anything is allocated. Sets p->ni, p->blocks_per_io, p->nios and
 * *qdepth, the entries of a CPU path queue pair. */
static int check_device(struct perf *p, struct gpunvme_ctrl *ctrl, bool gpu, uint32_t *qdepth)
{
	int rc = cli_ns(ctrl, p->nsid, &p->ni);
	if (rc)
		return rc;
	struct gpunvme_ctrl_info ci;
	if ((rc = gpunvme_ctrl_info(ctrl, &ci)) < 0)
		return cli_lib_err(rc, "controller info");
	char h1[32];
	if (p->bytes % p->ni.lba_size)
		return cli_usage_err("-o %" PRIu64 ": not a multiple of the %u-byte LBA size of namespace %u", p->bytes,
				     p->ni.lba_size, p->nsid);
	uint64_t ns_bytes = p->ni.nsze * p->ni.lba_size;
	if (p->bytes > ns_bytes)
		return cli_usage_err("-o %" PRIu64 ": larger than namespace %u (%s)", p->bytes, p->nsid,
				     cli_human_bytes(ns_bytes, h1, sizeof(h1)));
	uint32_t lim = (ci.mqes < 1024 ? ci.mqes : 1024) - 1;
	if (gpu) {
		/* GPU queue pairs: a power of two of entries, up to CAP.MQES + 1,
		 * one kept empty (NVMe 1.4 §4.1.1) */
		uint32_t e = 2;
		while (e * 2 <= ci.mqes)
			e *= 2;
		lim = e - 1;
		if (p->depth > lim)
			return cli_usage_err("-q %u: the queue limit is %u I/Os in flight (GPU queues: a power of two "
					     "of entries, CAP.MQES %u entries)", p->depth, lim, ci.mqes);
	} else if (p->depth > lim) {
		return cli_usage_err("-q %u: the queue limit is %u I/Os in flight (CAP.MQES %u entries, at most 1024)",
				     p->depth, lim, ci.mqes);
	}
	if (p->queues > ci.nr_io_queues)
		return cli_usage_err("--queues %u: the controller granted %u I/O queue pairs", p->queues,
				     ci.nr_io_queues);
	if ((uint64_t)p->depth * p->bytes > (4ull << 30))
		return cli_usage_err("-q %u x -o %s is more than 4 GiB of buffers per queue pair", p->depth,
				     cli_human_bytes(p->bytes, h1, sizeof(h1)));
	p->blocks_per_io = p->bytes / p->ni.lba_size;
	p->nios = p->ni.nsze / p->blocks_per_io;
	/* room for every I/O of the depth, each split at MDTS */
	uint64_t parts = ci.max_xfer ? (p->bytes + ci.max_xfer - 1) / ci.max_xfer : 1;
	uint64_t want = parts * p->depth + 1;
	*qdepth = want > lim + 1 ? lim + 1 : (uint32_t)want;
	if (*qdepth < 2)
		*qdepth = 2;
	return 0;
}

/* Per thread: a queue pair, DMA buffers for depth I/Os, a slice of the
 * namespace for sequential workloads; a write workload's buffers get random
 * data. *nw counts the workers that hold something to free, on an error
 * too. */
static int setup_workers(struct perf *p, struct gpunvme_ctrl *ctrl, uint32_t qdepth, struct worker *ws, uint32_t *nw)
{
	char h1[32];
	bool reads_only = p->wl == WL_READ || p->wl == WL_RANDREAD;
	for (uint32_t k = 0; k < p->queues; k++) {
		*nw = k;
		struct worker *w = &ws[k];
		w->p = p;
		w->idx = k;
		w->rng = 0x9E3779B97F4A7C15ull * (k + 1) ^ cli_now_ns();
		if (!w->rng)
			w->rng = 1;
		w->seq_lo = p->nios * k / p->queues;
		w->seq_hi = p->nios * (k + 1) / p->queues;
		if (w->seq_hi <= w->seq_lo) {
			w->seq_lo = 0;
			w->seq_hi = p->nios;
		}
		w->seq_next = w->seq_lo;
		int e = gpunvme_qpair_create(ctrl, qdepth, &w->qp);
		if (e < 0) {
			w->qp = NULL;
			return cli_lib_err(e, "cannot create I/O queue pair %u of %u", k + 1, p->queues);
		}
		*nw = k + 1;
		w->dma = gpunvme_dma_alloc(ctrl, (size_t)(p->depth * p->bytes));
		w->ios = calloc(p->depth, sizeof(*w->ios));
		w->ready = calloc(p->depth, sizeof(*w->ready));
		if (!w->dma)
			return cli_lib_err(-ENOMEM, "cannot allocate %s of DMA memory for queue pair %u",
					   cli_human_bytes(p->depth * p->bytes, h1, sizeof(h1)), k + 1);
		if (!w->ios || !w->ready)
			return cli_err(EXIT_RUNTIME, "out of memory");
		for (uint32_t i = 0; i < p->depth; i++) {
			w->ios[i].w = w;
			w->ios[i].buf = w->dma + (size_t)i * p->bytes;
		}
		if (!reads_only) {
			uint64_t s = w->rng;
			uint64_t *q = (uint64_t *)w->dma;
			for (size_t i = 0; i < (size_t)(p->depth * p->bytes) / 8; i++)
				q[i] = gpunvme_perf_rnd(&s);
		}
	}
	return 0;
}

/* Start every thread, release them together (they spin until p->go) and
 * wait for them. *started: they ran, so a queue pair that did not drain
 * must not be freed. */
static int run_workers(struct perf *p, struct worker *ws, uint32_t nw, bool *started)
{
	for (uint32_t i = 0; i < nw; i++) {
		int e = pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
		if (e) {
			atomic_store(&p->stop, 1);
			int rc = cli_err(EXIT_RUNTIME, "cannot start thread %u: %s", i, strerror(e));
			p->t_start = cli_now_ns();
			p->t_end = p->t_start;
			atomic_store(&p->go, 1);
			for (uint32_t k = 0; k < i; k++)
				pthread_join(ws[k].tid, NULL);
			return rc;
		}
	}
	*started = true;
	p->t_start = cli_now_ns();
	p->t_end = p->t_start + (uint64_t)(p->seconds * 1e9);
	atomic_store(&p->go, 1);
	for (uint32_t i = 0; i < nw; i++)
		pthread_join(ws[i].tid, NULL);
	return 0;
}

/* The report, then the exit status: a queue pair's fatal error first, else
 * the I/O errors with the first one's cause. */
static int results(const struct perf *p, struct worker *ws, uint32_t nw, bool json)
{
	uint64_t errors = 0;
	struct worker *fatal = NULL, *errw = NULL;
	for (uint32_t i = 0; i < nw; i++) {
		errors += ws[i].errors;
		if (ws[i].fatal && !fatal)
			fatal = &ws[i];
		if (ws[i].errors && !errw)
			errw = &ws[i];
	}
	if (report(p, ws, nw, json, NULL))
		return cli_err(EXIT_RUNTIME, "out of memory");
	if (fatal)
		return cli_err(EXIT_RUNTIME, "%s", fatal->fatal_msg);
	if (!errors)
		return 0;
	if (errw->first_err == -EIO)
		return cli_err(EXIT_RUNTIME, "%" PRIu64 " I/O error(s); first: %s", errors,
			       gpunvme_status_str(errw->first_status));
	if (errw->first_err == -ETIMEDOUT)
		return cli_err(EXIT_RUNTIME, "%" PRIu64 " I/O error(s); first: no completion within %u ms "
			       "(--timeout)", errors, p->io_timeout_ms);
	return cli_err(EXIT_RUNTIME, "%" PRIu64 " I/O error(s); first: %s", errors, strerror(-errw->first_err));
}

/* A worker's queue pair and DMA memory are freed only when nothing is in
 * flight on them (or its thread never ran): the controller may still
 * write there. */
static void free_workers(struct gpunvme_ctrl *ctrl, struct worker *ws, uint32_t nw, bool started)
{
	if (!ws)
		return;
	for (uint32_t i = 0; i < nw; i++) {
		struct worker *w = &ws[i];
		bool ok = !started || w->drained;
		if (w->qp && ok)
			gpunvme_qpair_destroy(w->qp);
		if (w->dma && ok)
			gpunvme_dma_free(ctrl, w->dma);
		free(w->ios);
		free(w->ready);
	}
	free(ws);
}

int cmd_perf(int argc, char **argv)
{
	struct perf p;
	struct perf_opts o;
	int rc = parse_opts(argc, argv, &p, &o);
	if (rc || o.help)
		return rc;
	if (o.gpu) {
		/* before touching the device: a machine without a GPU gets one
		 * clear line, whatever the build */
#ifdef GPUNVME_HAVE_CUDA
		if (perf_gpu_probe()) /* "no CUDA GPU: why: fix", as docs/cli.md shows */
			return cli_err(EXIT_RUNTIME, "%s", perf_gpu_error());
#else
		return cli_err(EXIT_RUNTIME, "no CUDA GPU: this gpunvme was built without CUDA: run without --gpu, "
					     "or build with CUDA (nvcc; cmake -DGPUNVME_CUDA=ON)");
#endif
	}

	struct gpunvme_opts opts;
	gpunvme_opts_init(&opts);
	if (o.timeout_ms)
		opts.io_timeout_ms = o.timeout_ms;
	if (p.queues > opts.nr_io_queues)
		opts.nr_io_queues = p.queues;  /* ask for as many as needed */
	p.io_timeout_ms = opts.io_timeout_ms;
	struct gpunvme_ctrl *ctrl;
	if ((rc = cli_open(p.uri, &opts, &ctrl)))
		return rc;
	struct worker *ws = NULL;
	uint32_t nw = 0, qdepth = 0;
	bool started = false, gpu_stuck = false;
	if (o.gpu) {
		/* the one tier policy (tier.h) judges the controller first: a
		 * tier it cannot do is refused with the reason, before the GPU
		 * is looked for (the same answer on every machine) */
		enum gpunvme_tier chosen;
		if (gpunvme_tier_choose(&ctrl, 1, true, (enum gpunvme_tier)o.tier, &chosen)) {
			rc = cli_err(EXIT_RUNTIME, "--tier %u: %s", o.tier, gpunvme_last_error());
			goto out;
		}
	}
	if ((rc = check_device(&p, ctrl, o.gpu, &qdepth)))
		goto out;
	if (o.gpu) {
#ifdef GPUNVME_HAVE_CUDA
		rc = run_gpu(&p, ctrl, o.tier, o.gpu_mode, o.json, &gpu_stuck);
#endif
		goto out;
	}
	ws = calloc(p.queues, sizeof(*ws));
	if (!ws) {
		rc = cli_err(EXIT_RUNTIME, "out of memory");
		goto out;
	}
	if ((rc = setup_workers(&p, ctrl, qdepth, ws, &nw)) || (rc = run_workers(&p, ws, nw, &started)))
		goto out;
	rc = results(&p, ws, nw, o.json);

out:
	free_workers(ctrl, ws, nw, started);
	if (gpu_stuck)
		return rc; /* a GPU kernel may still use the controller: let exit tear it down */
	gpunvme_close(ctrl);
	return rc;
}
