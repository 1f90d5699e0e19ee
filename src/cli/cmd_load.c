/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme load: stream the tensors of a safetensors or GGUF file that sits
 * in an ext4/XFS file system on a namespace into GPU memory (Tier 2),
 * pinned host memory (Tier 1) or host memory (CPU data path), through the
 * file's extents — no mount, no page cache, no CPU copy of the bulk.
 *
 * Destination layout (gpunvme_model_buffers_alloc): selected tensors are
 * grouped into runs of nearby file bytes, each in loader memory placed for
 * its file offset, so only a run's first and last blocks are bounced. The
 * runs are loaded in pieces (1/16 of the load, 64 MiB to 1 GiB) so a
 * progress bar can follow them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef GPUNVME_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "gpunvme/gpu.h"
#endif

#include "gpunvme/extents.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"
#include "gpunvme/modelset.h"
#include "gpunvme/sha256.h"
#include "gpunvme/tier.h"
#include "util.h"

/*
 * Runs are loaded in pieces so a progress bar can follow them. On an md
 * array every piece is a join across the members (each member's reads on
 * its own stream, the caller's stream waiting for all): the member that
 * finishes first idles until the last command of the slowest one is in,
 * and every piece starts with queues to fill. At 64 MiB pieces that cost
 * 3-5 % on modeled Gen5 drives; 1 GiB pieces took 1 member from 97.3 to
 * 99.4 % of its 14 GB/s and 2 members from 95.5 to 99.4 % of 28 GB/s
 * (bench/results/md-raid0-2026-11-25). So a piece is 1/16 of the load, at
 * least 64 MiB (updates for small loads) and at most 1 GiB (a few seconds
 * per update at 7 GB/s, and the join stays near 1 %).
 */
#define PIECE_MIN (64ull << 20)
#define PIECE_MAX (1ull << 30)
#define HOST_CHUNK (4u << 20) /* copies back for hashing and verifying */

struct load_opts {
	const char *uri, *path, *tensors;
	uint32_t queues, depth;
	struct cli_volume_opts vol; /* --nsid, --partition, --offset */
	int tier;                   /* -1 auto */
	bool verify, json, progress;
};

struct load_ctx {
	struct load_opts o;
	struct cli_fs f;            /* controller, namespace, file system */
	struct gpunvme_model_set *set; /* the model's files in one address space */
	const struct gpunvme_model *m;  /* the set's merged index */
	struct gpunvme_layer_loader *l;
	struct gpunvme_model_buffers *b; /* selected tensors, runs, destinations */
	char (*sha)[65];            /* per selected tensor */
	enum gpunvme_tier tier;
	uint64_t moved;             /* run bytes loaded */
	double secs;
	uint8_t *host;              /* HOST_CHUNK staging for Tier 2 reads back */
	uint8_t *vbuf;              /* HOST_CHUNK for --verify */
	uint64_t piece;             /* bytes per load call (PIECE_MIN..PIECE_MAX) */
	/* Notes (the tier chosen, the files of a set) are held until the load
	 * succeeds: a failed command prints one line, its error (the CLI's
	 * convention, tests/harness/cli_checks.sh), not a note before it. */
	FILE *notes;
	char *notes_buf;
	size_t notes_len;
};

/* Starts a note ("gpunvme: load: note: "); the caller writes the rest of
 * the line to the stream returned (NULL: out of memory, no note). */
static FILE *note_begin(struct load_ctx *x)
{
	if (!x->notes && !(x->notes = open_memstream(&x->notes_buf, &x->notes_len)))
		return NULL;
	fputs("gpunvme: load: note: ", x->notes);
	return x->notes;
}

static void notes_flush(struct load_ctx *x)
{
	if (!x->notes)
		return;
	fclose(x->notes);
	x->notes = NULL;
	fwrite(x->notes_buf, 1, x->notes_len, stderr);
}

static void help(void)
{
	printf("usage: gpunvme load URI PATH [options]\n"
	       "\n"
	       "Load the tensors of a model in an ext4/XFS file system on the namespace into\n"
	       "GPU memory, reading its files through their extents. PATH is a safetensors or\n"
	       "GGUF file, a Hugging Face model directory (model.safetensors, or\n"
	       "model.safetensors.index.json and its shards), an index file, or any shard of a\n"
	       "llama.cpp split GGUF (...-00001-of-00003.gguf: every shard is loaded).\n"
	       "\n"
	       CLI_VOLUME_HELP
	       "  -t, --tensors GLOBS  only tensors matching a pattern (* ? [..]; comma list)\n"
	       "      --tier T         2: GPU memory, 1: pinned host memory (GPU-initiated I/O),\n"
	       "                       cpu: host memory through the CPU data path\n"
	       "                       (default: the tier policy: 2 where the controller can DMA\n"
	       "                       into GPU memory, else 1; cpu without a GPU)\n"
	       "  -q, --queues N       queue pairs (default: up to 8, or a multiple of the emulator's workers;\n"
	       "                       as many as the controller has free)\n"
	       "  -d, --depth N        entries per queue (default: up to 256, as CAP.MQES allows)\n"
	       "      --verify         re-read every tensor through the CPU path and compare\n"
	       "  -j, --json           JSON with each tensor's sha256 (of the loaded bytes)\n"
	       "      --no-progress    no progress bar (it is shown only on a terminal)\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "example: gpunvme load emu:/tmp/ext4.img /models/model.safetensors --verify\n");
}

static int parse(int argc, char **argv, struct load_opts *o)
{
	static const struct option lo[] = {
		CLI_VOLUME_LONGOPTS,
		{"tensors", required_argument, NULL, 't'},
		{"tier", required_argument, NULL, 'T'},
		{"queues", required_argument, NULL, 'q'},
		{"depth", required_argument, NULL, 'd'},
		{"verify", no_argument, NULL, 'V'},
		{"json", no_argument, NULL, 'j'},
		{"no-progress", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	int c, rc;
	while ((c = cli_getopt(argc, argv, "n:t:q:d:jh", lo)) != -1) {
		if (cli_volume_opt(c, optarg, &o->vol, &rc)) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 't':
			if (!*optarg)
				return cli_usage_err("--tensors '': give one or more patterns, e.g. 'blk.0.*,token_embd*'");
			o->tensors = optarg;
			break;
		case 'T':
			if (!strcmp(optarg, "cpu") || !strcmp(optarg, "0"))
				o->tier = GPUNVME_TIER_CPU;
			else if (!strcmp(optarg, "1"))
				o->tier = GPUNVME_TIER_1;
			else if (!strcmp(optarg, "2"))
				o->tier = GPUNVME_TIER_2;
			else
				return cli_usage_err("--tier '%s': expected cpu, 1 or 2", optarg);
			break;
		case 'q':
			if ((rc = cli_opt_u32("--queues", optarg, false, 1, 64, &o->queues)))
				return rc;
			break;
		case 'd':
			if ((rc = cli_opt_u32("--depth", optarg, false, 2, 4096, &o->depth)))
				return rc;
			break;
		case 'V': o->verify = true; break;
		case 'j': o->json = true; break;
		case 'P': o->progress = false; break;
		case 'h': help(); return -1;
		default: return EXIT_USAGE;
		}
	}
	return cli_uri_model_path(argc, argv, &o->vol, &o->uri, &o->path);
}

/* ---- the model ------------------------------------------------------------------ */

static int open_file(struct load_ctx *x)
{
	const struct load_opts *o = &x->o;
	int rc;
	/* the loader's queue pairs plus the file system reader's; by default
	 * as many as the loader may take (16: a multiple of the emulator's
	 * workers, loader.c auto_queues) */
	struct gpunvme_opts go;
	gpunvme_opts_init(&go);
	uint32_t want = (o->queues ? o->queues : 16) + 1;
	if (go.nr_io_queues < want)
		go.nr_io_queues = want;
	if ((rc = cli_fs_open(&x->f, o->uri, &go, NULL, &o->vol)))
		return rc;
	if ((rc = gpunvme_model_set_open(x->f.fs, o->path, &x->set))) {
		if (rc == -ENOENT || rc == -ENOTDIR)
			return cli_err(EXIT_RUNTIME, "%s: %s in the %s file system of %s (%s)", o->path, strerror(-rc),
				       gpunvme_fs_type(x->f.fs), o->uri, gpunvme_last_error());
		/* the message names the file it is about (a shard, an index) */
		return cli_err(EXIT_RUNTIME, "%s", gpunvme_last_error());
	}
	x->m = x->set->model;
	FILE *n;
	if (x->set->n_files > 1 && (n = note_begin(x))) {
		cli_put_name(n, o->path, strlen(o->path));
		fprintf(n, ": %s, %zu files, %zu tensors\n", x->set->kind, x->set->n_files, x->m->n_tensors);
	}
	return 0;
}

/* ---- tier and loader ------------------------------------------------------------------ */

static bool gpu_usable(void)
{
#ifdef GPUNVME_HAVE_CUDA
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return false;
	}
	return n > 0;
#else
	return false;
#endif
}

static int start_loader(struct load_ctx *x)
{
	struct gpunvme_loader_opts lo;
	gpunvme_loader_opts_init(&lo);
	if (x->o.queues)
		lo.queues = x->o.queues;
	if (x->o.depth)
		lo.depth = x->o.depth;
	bool gpu = gpu_usable();
	/* the library's one tier policy (tier.h), over every member of an md
	 * array: the same answer Python and the layer stream get */
	struct gpunvme_ctrl *const *cs = x->f.md ? x->f.md->c : &x->f.c;
	size_t ncs = x->f.md ? x->f.md->n : 1;
	enum gpunvme_tier req = x->o.tier < 0 ? GPUNVME_TIER_AUTO : (enum gpunvme_tier)x->o.tier;
	int prc = gpunvme_tier_choose(cs, ncs, gpu, req, &x->tier);
#ifndef GPUNVME_HAVE_CUDA
	/* "none is usable" would send the user looking for a GPU */
	if (prc == -EOPNOTSUPP && req != GPUNVME_TIER_CPU)
		return cli_err(EXIT_RUNTIME, "--tier %s: %s (this build has no CUDA support)", gpunvme_tier_str(req),
			       gpunvme_last_error());
#endif
	if (prc)
		return cli_err(EXIT_RUNTIME, "--tier %s: %s", gpunvme_tier_str(req), gpunvme_last_error());
	FILE *n;
	if (req == GPUNVME_TIER_AUTO && x->tier == GPUNVME_TIER_1 && (n = note_begin(x))) {
		char cb[96];
		struct gpunvme_ctrl_info ci;
		uint32_t caps = GPUNVME_CAP_ALL;
		for (size_t i = 0; i < ncs; i++)
			if (gpunvme_ctrl_info(cs[i], &ci) == 0)
				caps &= ci.caps;
		fprintf(n, "%s: cannot DMA into GPU memory (capabilities: %s): loading into pinned host memory the GPU "
			   "reads (tier 1); GPU memory as a DMA target needs emu: or the gpunvme kernel module "
			   "(kmod:BDF)\n", x->o.uri, gpunvme_caps_str(caps, cb, sizeof(cb)));
	}
	if (req == GPUNVME_TIER_AUTO && !gpu && (n = note_begin(x)))
		fprintf(n, "no CUDA GPU %s: loading into host memory through the CPU data path\n",
#ifdef GPUNVME_HAVE_CUDA
			"is usable here"
#else
			"support in this build"
#endif
		);
	lo.tier = x->tier;
#ifdef GPUNVME_HAVE_CUDA
	lo.gpu = gpunvme_loader_gpu_backend();
#endif
	/* The file system reader holds one queue pair. A controller that
	 * granted no other: the reader gives its one to the loader
	 * (gpunvme_volume_make_room, in the loader's init), and gets it back
	 * for --verify once the loads are done (the CPU tier can hand its
	 * queues back; the GPU tiers keep theirs). */
	if (gpunvme_io_queues_free(x->f.c) == 0) {
		struct gpunvme_ctrl_info ci;
		gpunvme_ctrl_info(x->f.c, &ci);
		if (x->o.verify && x->tier != GPUNVME_TIER_CPU)
			return cli_err(EXIT_RUNTIME,
				       "--verify reads the file back on a second I/O queue pair while tier %s holds its own; "
				       "the controller granted %u (use --tier cpu, or leave out --verify)",
				       gpunvme_tier_str(x->tier), ci.nr_io_queues);
	}
	/* an md array: a loader per member, on the member's controller */
	int rc = gpunvme_layer_loader_init_volume(x->f.vol, x->set->ext, x->set->n_ext, x->set->size, &lo, &x->l);
	if (rc)
		return cli_lib_err(rc, "layer loader");
	/* tensors grouped into runs of nearby file bytes, each in loader memory
	 * placed for its offset (only a run's edge blocks are bounced) */
	if ((rc = gpunvme_model_buffers_alloc(x->l, x->m, x->o.tensors, &x->b))) {
		if (rc == -ENOENT)
			return cli_err(EXIT_RUNTIME, "%s: %s", x->o.path, gpunvme_last_error());
		return cli_lib_err(rc, "destination memory");
	}
	x->sha = calloc(x->b->n_tensors ? x->b->n_tensors : 1, sizeof(*x->sha));
	x->host = malloc(HOST_CHUNK);
	x->vbuf = malloc(HOST_CHUNK);
	if (!x->host || !x->vbuf || !x->sha)
		return cli_err(EXIT_RUNTIME, "out of memory");
	return 0;
}

/* ---- loading ------------------------------------------------------------------------------ */

static void progress(const struct load_ctx *x, uint64_t done, uint64_t all, uint64_t t0, bool last)
{
	if (!x->o.progress)
		return;
	double s = (double)(cli_now_ns() - t0) / 1e9;
	double gbps = s > 0 ? (double)done / s / 1e9 : 0;
	double eta = gbps > 0 ? (double)(all - done) / (gbps * 1e9) : 0;
	int w = 30, fill = all ? (int)((double)done / (double)all * w) : w;
	char hb[32], ha[32];
	printf("\r[%.*s%*s] %s / %s  %.2f GB/s  ETA %.0f s ", fill, "##############################", w - fill, "",
	       cli_human_bytes(done, hb, sizeof(hb)), cli_human_bytes(all, ha, sizeof(ha)), gbps, eta);
	if (last)
		printf("\n");
	fflush(stdout);
}

static int load_cpu(struct load_ctx *x, uint64_t t0, uint64_t all)
{
	for (size_t k = 0; k < x->b->n_runs; k++) {
		const struct gpunvme_model_run *r = &x->b->runs[k];
		/* pieces that meet at the file's 4 KiB blocks (gpunvme_model_run_piece) */
		for (uint64_t o = 0, n; o < r->len; o += n) {
			n = gpunvme_model_run_piece(x->b, k, o, x->piece);
			uint16_t status = 0;
			/* the run's edge blocks into its slack where enabled
			 * (GPUNVME_LOAD_EDGES), as the library's own loads */
			struct gpunvme_load_span sp;
			int rc = gpunvme_model_run_span(x->b, k, o, n, &sp);
			if (!rc)
				rc = gpunvme_load_layer(x->l, sp.off, sp.len, sp.dst, &status);
			if (rc)
				return cli_lib_err(rc, "loading bytes %" PRIu64 "+%" PRIu64 " of %s", r->off + o, n,
						   x->o.path);
			x->moved += n;
			progress(x, x->moved, all, t0, false);
		}
	}
	return 0;
}

#ifdef GPUNVME_HAVE_CUDA
/* Every chunk is queued at once on one stream with an event behind it;
 * the host only watches the events go by for the progress bar. */
static int load_gpu(struct load_ctx *x, uint64_t t0, uint64_t all)
{
	size_t nchunks = 0;
	for (size_t k = 0; k < x->b->n_runs; k++)
		for (uint64_t o = 0; o < x->b->runs[k].len; o += gpunvme_model_run_piece(x->b, k, o, x->piece))
			nchunks++;
	cudaEvent_t *ev = calloc(nchunks ? nchunks : 1, sizeof(*ev));
	uint64_t *bytes = calloc(nchunks ? nchunks : 1, sizeof(*bytes));
	cudaStream_t s = NULL;
	int rc = 0;
	size_t queued = 0;
	if (!ev || !bytes || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
		rc = cli_err(EXIT_RUNTIME, "cannot set up a CUDA stream");
		goto out;
	}
	for (size_t k = 0; k < x->b->n_runs && !rc; k++) {
		const struct gpunvme_model_run *r = &x->b->runs[k];
		for (uint64_t o = 0, n; o < r->len && !rc; o += n) {
			n = gpunvme_model_run_piece(x->b, k, o, x->piece);
			if (cudaEventCreateWithFlags(&ev[queued], cudaEventDisableTiming | cudaEventBlockingSync) !=
			    cudaSuccess) {
				rc = cli_err(EXIT_RUNTIME, "cannot create a CUDA event");
				break;
			}
			bytes[queued] = n;
			struct gpunvme_load_span sp;
			int lrc = gpunvme_model_run_span(x->b, k, o, n, &sp);
			if (!lrc)
				lrc = gpunvme_load_layer_async(x->l, sp.off, sp.len, sp.dst, s, ev[queued]);
			queued++;
			if (lrc)
				rc = cli_lib_err(lrc, "queueing bytes %" PRIu64 "+%" PRIu64, r->off + o, n);
		}
	}
	for (size_t i = 0; i < queued; i++) {
		cudaEventSynchronize(ev[i]);
		x->moved += bytes[i];
		progress(x, x->moved, all, t0, false);
	}
	if (s)
		cudaStreamSynchronize(s);
	if (!rc) {
		uint16_t status = 0;
		int crc = gpunvme_layer_loader_check(x->l, &status);
		if (crc)
			rc = cli_lib_err(crc, "loading %s", x->o.path);
	}
out:
	for (size_t i = 0; i < queued; i++)
		cudaEventDestroy(ev[i]);
	if (s)
		cudaStreamDestroy(s);
	free(ev);
	free(bytes);
	return rc;
}
#endif

static int load_all(struct load_ctx *x)
{
	uint64_t all = x->b->run_bytes;
	for (x->piece = PIECE_MIN; x->piece < PIECE_MAX && all / x->piece > 16; x->piece <<= 1)
		;
	uint64_t t0 = cli_now_ns();
	int rc;
#ifdef GPUNVME_HAVE_CUDA
	if (x->tier != GPUNVME_TIER_CPU)
		rc = load_gpu(x, t0, all);
	else
#endif
		rc = load_cpu(x, t0, all);
	x->secs = (double)(cli_now_ns() - t0) / 1e9;
	if (!rc)
		progress(x, x->moved, all, t0, true);
	else if (x->o.progress)
		printf("\n");
	return rc;
}

/* ---- checking the destination ---------------------------------------------------------------- */

/* Bytes [off, off + n) of a tensor as they sit in destination memory: a
 * pointer to them (host tiers) or a copy in x->host (Tier 2). */
static const uint8_t *dst_bytes(struct load_ctx *x, size_t i, uint64_t off, size_t n)
{
	const uint8_t *p = (const uint8_t *)x->b->ptr[i] + off;
#ifdef GPUNVME_HAVE_CUDA
	if (x->tier == GPUNVME_TIER_2) {
		if (cudaMemcpy(x->host, p, n, cudaMemcpyDeviceToHost) != cudaSuccess)
			return NULL;
		return x->host;
	}
#endif
	(void)n;
	return p;
}

static int hash_and_verify(struct load_ctx *x)
{
	if (!x->o.json && !x->o.verify)
		return 0;
	/* the reference reader needs a queue pair: the loads are done */
	if (x->o.verify && gpunvme_io_queues_free(x->f.c) == 0)
		gpunvme_layer_loader_release_queues(x->l);
	for (size_t i = 0; i < x->b->n_tensors; i++) {
		const struct gpunvme_tensor *t = x->b->tensors[i];
		struct gpunvme_sha256 h;
		gpunvme_sha256_init(&h);
		for (uint64_t o = 0; o < t->bytes; o += HOST_CHUNK) {
			size_t n = t->bytes - o < HOST_CHUNK ? (size_t)(t->bytes - o) : HOST_CHUNK;
			const uint8_t *p = dst_bytes(x, i, o, n);
			if (!p)
				return cli_err(EXIT_RUNTIME, "%s: cannot read the destination memory back", t->name);
			if (x->o.json)
				gpunvme_sha256_update(&h, p, n);
			if (!x->o.verify)
				continue;
			/* the reference: the file's bytes through the CPU data
			 * path and the decoder's own pread, not the loader */
			const struct gpunvme_model_file *f = &x->set->files[t->file];
			int64_t got = gpunvme_fs_pread(x->f.fs, f->ino, x->vbuf, n, t->offset - f->base + o);
			if (got != (int64_t)n)
				return cli_lib_err(got < 0 ? (int)got : -EIO, "--verify: reading %s back", t->name);
			if (memcmp(p, x->vbuf, n)) {
				size_t d = 0;
				while (p[d] == x->vbuf[d])
					d++;
				return cli_err(EXIT_RUNTIME,
					       "--verify: tensor %s differs at byte %" PRIu64
					       " (%s, file offset %" PRIu64 "): loaded 0x%02x, file 0x%02x",
					       t->name, o + d, f->path, t->offset - f->base + o + d, p[d], x->vbuf[d]);
			}
		}
		uint8_t d[32];
		gpunvme_sha256_final(&h, d);
		gpunvme_sha256_hex(d, x->sha[i]);
	}
	return 0;
}

/* ---- output -------------------------------------------------------------------------------------- */

static void shape_str(const struct gpunvme_tensor *t, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "[");
	for (uint32_t d = 0; d < t->ndim && k < len; d++)
		k += (size_t)snprintf(buf + k, len - k, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
	if (k < len)
		snprintf(buf + k, len - k, "]");
}

/* Names come from the file: escaped as `ls` escapes file names. */
static void print_name(const char *s, int width)
{
	int n = (int)cli_put_name(stdout, s, strlen(s));
	for (; n < width; n++)
		putchar(' ');
}

static void print_json(struct load_ctx *x)
{
	struct cli_json j;
	cj_init(&j, stdout);
	cj_obj_begin(&j, NULL);
	cj_str(&j, "uri", x->o.uri);
	cj_str(&j, "path", x->o.path);
	cj_str(&j, "format", gpunvme_model_format_name(x->m->format));
	cj_str(&j, "layout", x->set->kind);
	cj_u64(&j, "files", x->set->n_files);
	cj_str(&j, "fs", gpunvme_fs_type(x->f.fs));
	cj_str(&j, "tier", gpunvme_tier_str(x->tier));
	cj_u64(&j, "bytes", x->b->bytes);
	cj_u64(&j, "bytes_read", x->moved);
	cj_dbl(&j, "seconds", x->secs);
	cj_dbl(&j, "gbps", x->secs > 0 ? (double)x->moved / x->secs / 1e9 : 0);
	cj_bool(&j, "verified", x->o.verify);
	struct gpunvme_loader_stats st;
	gpunvme_layer_loader_stats(x->l, &st);
	cj_u64(&j, "direct_bytes", st.direct_bytes);
	cj_u64(&j, "bounced_bytes", st.bounced_bytes);
	if (x->f.md) {
		/* per-member (per-controller) statistics: every member read its share */
		cj_arr_begin(&j, "members");
		for (size_t k = 0; k < x->f.md->n; k++) {
			struct gpunvme_loader_stats ms;
			if (gpunvme_layer_loader_member_stats(x->l, (uint32_t)k, &ms))
				break;
			cj_obj_begin(&j, NULL);
			cj_str(&j, "uri", x->f.md->name[k]);
			cj_u64(&j, "commands", ms.commands);
			cj_u64(&j, "direct_bytes", ms.direct_bytes);
			cj_u64(&j, "bounced_bytes", ms.bounced_bytes);
			cj_obj_end(&j);
		}
		cj_arr_end(&j);
	}
	cj_arr_begin(&j, "tensors");
	for (size_t i = 0; i < x->b->n_tensors; i++) {
		const struct gpunvme_tensor *t = x->b->tensors[i];
		cj_obj_begin(&j, NULL);
		cj_str(&j, "name", t->name);
		cj_str(&j, "dtype", t->dtype);
		cj_arr_begin(&j, "shape");
		for (uint32_t d = 0; d < t->ndim; d++)
			cj_u64(&j, NULL, t->shape[d]);
		cj_arr_end(&j);
		const struct gpunvme_model_file *f = &x->set->files[t->file];
		if (x->set->n_files > 1)
			cj_str(&j, "file", f->path);
		cj_u64(&j, "offset", t->offset - f->base); /* in its file */
		cj_u64(&j, "bytes", t->bytes);
		cj_str(&j, "sha256", x->sha[i]);
		cj_obj_end(&j);
	}
	cj_arr_end(&j);
	cj_obj_end(&j);
	cj_finish(&j);
}

static void print_table(struct load_ctx *x)
{
	int w = 4;
	for (size_t i = 0; i < x->b->n_tensors; i++) {
		int n = (int)strlen(x->b->tensors[i]->name);
		w = n > w ? (n < 60 ? n : 60) : w;
	}
	printf("%-*s  %-8s  %-24s  %14s\n", w, "name", "dtype", "shape", "bytes");
	for (size_t i = 0; i < x->b->n_tensors; i++) {
		const struct gpunvme_tensor *t = x->b->tensors[i];
		char sh[128];
		shape_str(t, sh, sizeof(sh));
		print_name(t->name, w);
		printf("  %-8s  %-24s  %14" PRIu64 "\n", t->dtype, sh, t->bytes);
	}
	struct gpunvme_loader_stats st;
	gpunvme_layer_loader_stats(x->l, &st);
	char hb[32], hd[32], hbn[32];
	/* the path is bytes from the command line: escaped as ls shows names */
	printf("%s: %zu of %zu tensors, %s (", gpunvme_model_format_name(x->m->format), x->b->n_tensors,
	       x->m->n_tensors, cli_human_bytes(x->b->bytes, hb, sizeof(hb)));
	cli_put_name(stdout, x->o.path, strlen(x->o.path));
	printf(") in %.3f s, %.2f GB/s, tier %s; %s by DMA into place, %s bounced%s\n", x->secs, x->secs > 0 ? (double)x->moved / x->secs / 1e9 : 0, gpunvme_tier_str(x->tier),
	       cli_human_bytes(st.direct_bytes, hd, sizeof(hd)), cli_human_bytes(st.bounced_bytes, hbn, sizeof(hbn)),
	       x->o.verify ? "; verified against the CPU path" : "");
}

static void done(struct load_ctx *x)
{
	gpunvme_model_buffers_free(x->l, x->b);
	gpunvme_layer_loader_destroy(x->l);
	gpunvme_model_set_free(x->set);
	free(x->sha);
	free(x->host);
	free(x->vbuf);
	cli_fs_close(&x->f);
}

int cmd_load(int argc, char **argv)
{
	struct load_ctx x;
	memset(&x, 0, sizeof(x));
	cli_volume_opts_init(&x.o.vol);
	x.o.tier = -1;
	x.o.progress = true;
	int rc = parse(argc, argv, &x.o);
	if (rc)
		return rc < 0 ? 0 : rc;
	x.o.progress = x.o.progress && !x.o.json && isatty(STDOUT_FILENO);
	if (!(rc = open_file(&x)) && !(rc = start_loader(&x)) && !(rc = load_all(&x)) &&
	    !(rc = hash_and_verify(&x))) {
		if (x.o.json)
			print_json(&x);
		else
			print_table(&x);
	}
	if (!rc)
		notes_flush(&x);
	else if (x.notes)
		fclose(x.notes);
	free(x.notes_buf);
	done(&x);
	return rc;
}
