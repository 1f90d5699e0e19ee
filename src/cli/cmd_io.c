/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme read / write: move nlb blocks between a namespace and a file (or
 * stdin/stdout) through one DMA buffer split into `depth` slots of `chunk`
 * bytes, all in flight at once on one queue pair. Chunk n always uses slot
 * n % depth and slots are retired in order, so the file is read and written
 * sequentially. Transfers larger than MDTS are split by the library.
 *
 * Everything that can be checked is checked before the first command:
 * options, the namespace, the LBA range, the input file's size, the output
 * file's directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define DEF_CHUNK (2u << 20)
#define DEF_DEPTH 4u
#define MAX_DEPTH 256u
#define MAX_CHUNK (64ull << 20)

static void help(bool is_write)
{
	if (is_write)
		printf("usage: gpunvme write URI --slba N --nlb N --in FILE [options]\n"
		       "\n"
		       "Write nlb blocks starting at LBA slba from FILE ('-' = stdin). The file must\n"
		       "hold exactly nlb * LBA-size bytes: a shorter file, or one that is not a whole\n"
		       "number of blocks, is refused before anything is written; so is a longer\n"
		       "one unless --allow-trailing is given (then only its first bytes are used).\n"
		       "A Flush follows the last write unless --no-flush.\n");
	else
		printf("usage: gpunvme read URI --slba N --nlb N --out FILE [options]\n"
		       "\n"
		       "Read nlb blocks starting at LBA slba into FILE ('-' = stdout; not a terminal).\n"
		       "FILE is created or truncated; on an error a file this command created is\n"
		       "removed.\n");
	printf("\n"
	       "  -s, --slba N         first LBA\n"
	       "      --nlb N          number of blocks (1-based count, any size)\n"
	       "  -n, --nsid N         namespace (default 1)\n"
	       "%s"
	       "      --chunk SIZE     bytes per request, a multiple of the LBA size (default 2M)\n"
	       "      --depth N        requests in flight on the queue pair (default 4, at most %u)\n"
	       "      --timeout MS     per-command timeout (default 30000)\n"
	       "  -q, --quiet          no summary line on stderr\n"
	       "  -h, --help           this text\n"
	       "\n"
	       "Numbers: decimal or 0x hex; SIZE also takes K/M/G. A summary line (bytes,\n"
	       "GB/s) goes to stderr.\n"
	       "\n"
	       "example: gpunvme %s 'emu:/tmp/disk.img' --slba 0 --nlb 2048 %s\n",
	       is_write ? "  -d, --in FILE        input file, '-' for stdin (also --data)\n"
			  "      --allow-trailing a longer input is fine: its first bytes are written\n"
			  "      --no-flush       no Flush command at the end\n"
			: "  -d, --out FILE       output file, '-' for stdout (also --data)\n",
	       MAX_DEPTH, is_write ? "write" : "read", is_write ? "--in data.bin" : "--out data.bin");
}

enum { ST_IDLE = 0, ST_BUSY, ST_DONE };

struct slot {
	uint8_t *buf;
	uint64_t slba, nlb;
	int state;
	int err;
	uint16_t status;
};

static void slot_cb(void *arg, const struct gpunvme_cpl *cpl)
{
	struct slot *s = arg;
	s->err = cpl->err;
	s->status = cpl->status;
	s->state = ST_DONE;
}

static int io_error(const char *what, const struct slot *s, int err, uint16_t status)
{
	/* a write-protected namespace (an emu: image opened read-only): the
	 * status alone does not say what to change */
	bool wp = gpunvme_status_sct(status) == 0 && gpunvme_status_sc(status) == (GPUNVME_SC_NS_WRITE_PROTECTED & 0xff);
	if (err == -EIO)
		return cli_err(EXIT_RUNTIME, "%s of LBA %" PRIu64 "..%" PRIu64 " failed: %s%s", what, s->slba,
			       s->slba + s->nlb - 1, gpunvme_status_str(status),
			       wp ? " (an emu: image not writable here, or readonly=1, is served read-only: make the file "
				    "writable, or add ?snapshot=1 to keep writes in memory)"
				  : "");
	const char *le = gpunvme_last_error();
	return cli_err(EXIT_RUNTIME, "%s of LBA %" PRIu64 "..%" PRIu64 " failed: %s", what, s->slba,
		       s->slba + s->nlb - 1, le && *le ? le : strerror(-err));
}

/* The command line, checked. */
struct io_args {
	bool is_write;
	bool help;        /* --help: printed, nothing else to do */
	const char *uri;
	const char *path; /* the file; "<stdin>" or "<stdout>" for '-' (in messages) */
	bool is_std;      /* '-': stdin or stdout */
	uint64_t slba, nlb, chunk;
	uint32_t nsid, depth, timeout_ms;
	bool allow_trailing, flush, quiet;
};

/* What the command opened, and the transfer's progress. */
struct io_state {
	int fd;
	bool created;          /* read: this command created the output file */
	struct stat st;        /* write: the input's; read: zeroes */
	struct gpunvme_opts opts;
	struct gpunvme_ctrl *ctrl;
	struct gpunvme_ns_info ni;
	uint64_t total;        /* bytes to move */
	struct gpunvme_qpair *qp;
	uint8_t *dma;
	struct slot *slots;
	uint32_t depth;        /* slots: --depth, at most one per chunk */
	uint64_t chunk_blocks; /* blocks per slot */
	uint64_t next_lba, end_lba;
	uint64_t in_bytes;     /* write: bytes taken from the input */
	bool drained;          /* nothing in flight: the queue pair and DMA memory may be freed */
};

static int parse_opts(int argc, char **argv, bool is_write, struct io_args *a)
{
	static const struct option lo[] = {
		{"slba", required_argument, NULL, 's'},
		{"start-block", required_argument, NULL, 's'},
		{"nlb", required_argument, NULL, 'N'},
		{"nsid", required_argument, NULL, 'n'},
		{"namespace-id", required_argument, NULL, 'n'},
		{"out", required_argument, NULL, 'O'},
		{"in", required_argument, NULL, 'I'},
		{"data", required_argument, NULL, 'd'},
		{"chunk", required_argument, NULL, 'C'},
		{"depth", required_argument, NULL, 'D'},
		{"timeout", required_argument, NULL, 'T'},
		{"allow-trailing", no_argument, NULL, 'A'},
		{"no-flush", no_argument, NULL, 'F'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	memset(a, 0, sizeof(*a));
	a->is_write = is_write;
	a->chunk = DEF_CHUNK;
	a->nsid = 1;
	a->depth = DEF_DEPTH;
	a->flush = true;
	bool have_slba = false, have_nlb = false;
	int c, rc;
	while ((c = cli_getopt(argc, argv, "s:n:d:qh", lo)) != -1) {
		switch (c) {
		case 's':
			if ((rc = cli_opt_u64("--slba", optarg, false, 0, UINT64_MAX, &a->slba)))
				return rc;
			have_slba = true;
			break;
		case 'N':
			if ((rc = cli_opt_u64("--nlb", optarg, false, 1, UINT64_MAX, &a->nlb)))
				return rc;
			have_nlb = true;
			break;
		case 'n':
			if ((rc = cli_opt_u32("--nsid", optarg, false, 1, 0xfffffffe, &a->nsid)))
				return rc;
			break;
		case 'O':
			if (is_write)
				return cli_usage_err("write takes --in FILE, not --out");
			a->path = optarg;
			break;
		case 'I':
			if (!is_write)
				return cli_usage_err("read takes --out FILE, not --in");
			a->path = optarg;
			break;
		case 'd': a->path = optarg; break;
		case 'C':
			if ((rc = cli_opt_u64("--chunk", optarg, true, 1, MAX_CHUNK, &a->chunk)))
				return rc;
			break;
		case 'D':
			if ((rc = cli_opt_u32("--depth", optarg, false, 1, MAX_DEPTH, &a->depth)))
				return rc;
			break;
		case 'T':
			if ((rc = cli_opt_u32("--timeout", optarg, false, 1, 3600000, &a->timeout_ms)))
				return rc;
			break;
		case 'A':
			if (!is_write)
				return cli_usage_err("--allow-trailing applies to write only");
			a->allow_trailing = true;
			break;
		case 'F':
			if (!is_write)
				return cli_usage_err("--no-flush applies to write only");
			a->flush = false;
			break;
		case 'q': a->quiet = true; break;
		case 'h': help(is_write); a->help = true; return 0;
		default: return EXIT_USAGE;
		}
	}
	a->uri = cli_one_uri(argc, argv);
	if (!a->uri)
		return EXIT_USAGE;
	if (!have_slba)
		return cli_usage_err("missing --slba N (first LBA)");
	if (!have_nlb)
		return cli_usage_err("missing --nlb N (number of blocks)");
	return 0;
}

/* What no single option can check on its own. */
static int check_args(struct io_args *a)
{
	if (!a->path)
		return cli_usage_err(a->is_write ? "missing --in FILE ('-' for stdin)"
						 : "missing --out FILE ('-' for stdout)");
	if ((uint64_t)a->depth * a->chunk > (1ull << 30))
		return cli_usage_err("--chunk %" PRIu64 " x --depth %u is more than 1 GiB of DMA buffer", a->chunk,
				     a->depth);
	int rc = cli_check_uri(a->uri);
	if (rc)
		return rc;
	a->is_std = !strcmp(a->path, "-");
	if (a->is_std)
		a->path = a->is_write ? "<stdin>" : "<stdout>";  /* for messages */
	return 0;
}

/* The input or output file, before the device is touched. A file is kept
 * in s only once it is open, so a failure here leaves nothing to undo
 * beyond s->fd. */
static int open_file(const struct io_args *a, struct io_state *s)
{
	memset(&s->st, 0, sizeof(s->st));
	if (a->is_write) {
		if (a->is_std) {
			s->fd = 0;
		} else {
			s->fd = open(a->path, O_RDONLY | O_CLOEXEC);
			if (s->fd < 0)
				return cli_err(EXIT_RUNTIME, "cannot open input file '%s': %s", a->path,
					       strerror(errno));
		}
		if (fstat(s->fd, &s->st) < 0)
			return cli_err(EXIT_RUNTIME, "cannot stat input '%s': %s", a->path, strerror(errno));
		if (S_ISDIR(s->st.st_mode))
			return cli_err(EXIT_RUNTIME, "input '%s' is a directory", a->path);
		return 0;
	}
	if (a->is_std) {
		if (isatty(1))
			return cli_usage_err("refusing to write binary data to a terminal: redirect "
					     "stdout or give --out FILE");
		s->fd = 1;
		return 0;
	}
	struct stat ost;
	bool created = stat(a->path, &ost) != 0;
	s->fd = open(a->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (s->fd < 0)
		return cli_err(EXIT_RUNTIME, "cannot create output file '%s': %s", a->path, strerror(errno));
	s->created = created;
	return 0;
}

/* The controller, the namespace and the LBA range. */
static int open_device(const struct io_args *a, struct io_state *s)
{
	gpunvme_opts_init(&s->opts);
	if (a->timeout_ms)
		s->opts.io_timeout_ms = a->timeout_ms;
	struct gpunvme_ctrl *ctrl = NULL;
	int rc = cli_open(a->uri, &s->opts, &ctrl);
	if (rc)
		return rc;
	s->ctrl = ctrl;
	if ((rc = cli_ns(s->ctrl, a->nsid, &s->ni)) || (rc = cli_check_range(&s->ni, a->slba, a->nlb)))
		return rc;
	if (a->nlb > UINT64_MAX / s->ni.lba_size)
		return cli_usage_err("--nlb %" PRIu64 ": too many bytes", a->nlb);
	s->total = a->nlb * s->ni.lba_size;
	if (a->chunk % s->ni.lba_size)
		return cli_usage_err("--chunk %" PRIu64 " is not a multiple of the %u-byte LBA size", a->chunk,
				     s->ni.lba_size);
	return 0;
}

/* The file against the transfer, now that the LBA size is known: an input
 * file of the wrong size is refused before anything is written; an output
 * file is truncated. */
static int check_file_size(const struct io_args *a, struct io_state *s)
{
	if (a->is_write && S_ISREG(s->st.st_mode)) {
		uint64_t fsz = (uint64_t)s->st.st_size, total = s->total;
		uint32_t lba_size = s->ni.lba_size;
		char h1[32], h2[32];
		if (fsz % lba_size && fsz < total)
			return cli_err(EXIT_RUNTIME, "input '%s' is %" PRIu64 " bytes, not a whole number of %u-byte "
				       "blocks; --nlb %" PRIu64 " needs exactly %" PRIu64 " bytes (%s)",
				       a->path, fsz, lba_size, a->nlb, total, cli_human_bytes(total, h1, sizeof(h1)));
		if (fsz < total)
			return cli_err(EXIT_RUNTIME, "input '%s' is too short: %" PRIu64 " bytes (%s), but --nlb %" PRIu64
				       " of %u-byte blocks needs exactly %" PRIu64 " bytes (%s); nothing written",
				       a->path, fsz, cli_human_bytes(fsz, h2, sizeof(h2)), a->nlb, lba_size, total,
				       cli_human_bytes(total, h1, sizeof(h1)));
		if (fsz > total && !a->allow_trailing)
			return cli_err(EXIT_RUNTIME, "input '%s' is longer than the transfer: %" PRIu64 " bytes, but --nlb %" PRIu64
				       " of %u-byte blocks is %" PRIu64 " bytes; nothing written (--allow-trailing "
				       "writes only the first %" PRIu64 " bytes)",
				       a->path, fsz, a->nlb, lba_size, total, total);
	}
	if (!a->is_write && !a->is_std) {
		struct stat ost;
		if (fstat(s->fd, &ost) == 0 && S_ISREG(ost.st_mode) && ftruncate(s->fd, 0) < 0)
			return cli_err(EXIT_RUNTIME, "cannot truncate '%s': %s", a->path, strerror(errno));
	}
	return 0;
}

/* One DMA buffer of depth slots and a queue pair deep enough for all of
 * them at once, each split at MDTS. */
static int setup_queue(const struct io_args *a, struct io_state *s)
{
	s->chunk_blocks = a->chunk / s->ni.lba_size;
	uint64_t nchunks = (a->nlb + s->chunk_blocks - 1) / s->chunk_blocks;
	s->depth = a->depth > nchunks ? (uint32_t)nchunks : a->depth;
	if (nchunks == 1)
		s->chunk_blocks = a->nlb;  /* small transfer: buffer just what is needed */
	size_t slot_bytes = (size_t)(s->chunk_blocks * s->ni.lba_size);
	s->dma = gpunvme_dma_alloc(s->ctrl, slot_bytes * s->depth);
	if (!s->dma) {
		char h[32];
		return cli_lib_err(-ENOMEM, "cannot allocate %s of DMA memory (try a smaller --chunk or --depth)",
				   cli_human_bytes((uint64_t)slot_bytes * s->depth, h, sizeof(h)));
	}
	s->slots = calloc(s->depth, sizeof(*s->slots));
	if (!s->slots)
		return cli_err(EXIT_RUNTIME, "out of memory");
	for (uint32_t i = 0; i < s->depth; i++)
		s->slots[i].buf = s->dma + (size_t)i * slot_bytes;
	struct gpunvme_ctrl_info ci;
	uint32_t qdepth = 0;
	if (gpunvme_ctrl_info(s->ctrl, &ci) == 0) {
		uint64_t parts = ci.max_xfer ? (slot_bytes + ci.max_xfer - 1) / ci.max_xfer : 1;
		uint64_t want = parts * s->depth + 1;
		uint32_t lim = ci.mqes < 1024 ? ci.mqes : 1024;
		qdepth = want < 2 ? 2 : (want > lim ? lim : (uint32_t)want);
	}
	struct gpunvme_qpair *qp = NULL;
	int rc = gpunvme_qpair_create(s->ctrl, qdepth, &qp);
	if (rc < 0)
		return cli_lib_err(rc, "cannot create an I/O queue pair");
	s->qp = qp;
	return 0;
}

/* Give slot `sl` the next chunk (write: read it from the input first) and
 * submit it. `written` is the block count an early end of the input
 * reports as already written. */
static int start_slot(const struct io_args *a, struct io_state *s, struct slot *sl, uint64_t written)
{
	sl->slba = s->next_lba;
	sl->nlb = s->end_lba - s->next_lba < s->chunk_blocks ? s->end_lba - s->next_lba : s->chunk_blocks;
	if (a->is_write) {
		size_t want = (size_t)(sl->nlb * s->ni.lba_size);
		ssize_t n = cli_read_full(s->fd, sl->buf, want);
		if (n < 0)
			return cli_err(EXIT_RUNTIME, "reading '%s': %s", a->path, strerror((int)-n));
		s->in_bytes += (uint64_t)n;
		if ((size_t)n < want)
			return cli_err(EXIT_RUNTIME, "input '%s' ended after %" PRIu64 " bytes; --nlb %" PRIu64
				       " needs exactly %" PRIu64 " bytes (%" PRIu64 " blocks were written before)",
				       a->path, s->in_bytes, a->nlb, s->total, written);
	}
	sl->state = ST_BUSY;
	int e = a->is_write ? gpunvme_write(s->qp, a->nsid, sl->buf, sl->slba, sl->nlb, slot_cb, sl)
			    : gpunvme_read(s->qp, a->nsid, sl->buf, sl->slba, sl->nlb, slot_cb, sl);
	if (e) {
		sl->state = ST_IDLE;
		return io_error(a->is_write ? "submitting write" : "submitting read", sl, e, 0);
	}
	s->next_lba += sl->nlb;
	return 0;
}

/* Every slot in flight, then retire them in order (read: into the file)
 * and refill each with the next chunk until all nlb blocks are done. */
static int transfer(const struct io_args *a, struct io_state *s, uint64_t t0)
{
	const char *what = a->is_write ? "write" : "read";
	uint64_t retired = 0;
	uint32_t head = 0;
	uint64_t stall_ns = (uint64_t)s->opts.io_timeout_ms * 1000000ull + 5000000000ull;
	uint64_t last_progress = t0;
	int rc = 0;
	s->next_lba = a->slba;
	s->end_lba = a->slba + a->nlb;
	for (uint32_t i = 0; i < s->depth && s->next_lba < s->end_lba && rc == 0; i++)
		rc = start_slot(a, s, &s->slots[i], s->next_lba - a->slba);
	while (rc == 0 && retired < a->nlb) {
		int n = gpunvme_qpair_poll(s->qp, 0);
		if (n < 0)
			return cli_lib_err(n, "%s: the controller failed", what);
		uint64_t now = cli_now_ns();
		if (n > 0)
			last_progress = now;
		else if (now - last_progress > stall_ns)
			return cli_err(EXIT_RUNTIME, "%s: no completion for %" PRIu64 " s; giving up", what,
				       (uint64_t)((now - last_progress) / 1000000000u));
		while (rc == 0 && s->slots[head].state == ST_DONE) {
			struct slot *sl = &s->slots[head];
			sl->state = ST_IDLE;
			if (sl->err)
				return io_error(what, sl, sl->err, sl->status);
			if (!a->is_write) {
				ssize_t w = cli_write_all(s->fd, sl->buf, (size_t)(sl->nlb * s->ni.lba_size));
				if (w < 0) {
					char dst[300];
					snprintf(dst, sizeof(dst), "'%s'", a->path);
					return cli_write_err((int)w, dst);
				}
			}
			retired += sl->nlb;
			if (s->next_lba < s->end_lba)
				rc = start_slot(a, s, sl, retired);
			head = (head + 1) % s->depth;
		}
	}
	return rc;
}

/* write: a stream input must end exactly here; then the Flush. */
static int finish_write(const struct io_args *a, struct io_state *s)
{
	if (!S_ISREG(s->st.st_mode) && !a->allow_trailing) {
		uint8_t extra;
		ssize_t r = cli_read_full(s->fd, &extra, 1);
		if (r > 0)
			return cli_err(EXIT_RUNTIME, "input '%s' holds more than the %" PRIu64 " bytes of --nlb %" PRIu64
				       " (all %" PRIu64 " blocks were written; --allow-trailing accepts a longer input)",
				       a->path, s->total, a->nlb, a->nlb);
	}
	if (a->flush) {
		uint16_t stt = 0;
		int e = gpunvme_flush_sync(s->qp, a->nsid, &stt);
		if (e)
			return e == -EIO ? cli_err(EXIT_RUNTIME, "flush failed: %s", gpunvme_status_str(stt))
					 : cli_lib_err(e, "flush failed");
	}
	return 0;
}

/* After an error: wait for what is still in flight before its memory is
 * freed; what does not complete in time is leaked, not freed under the
 * controller. */
static void drain(struct io_state *s)
{
	uint64_t tdrain = cli_now_ns();
	while (gpunvme_qpair_outstanding(s->qp) > 0) {
		if (gpunvme_qpair_poll(s->qp, 0) < 0 ||
		    cli_now_ns() - tdrain > (uint64_t)s->opts.io_timeout_ms * 1000000ull + 2000000000ull)
			break;
	}
	s->drained = gpunvme_qpair_outstanding(s->qp) == 0;
}

/* the summary line on stderr */
static void report(const struct io_args *a, const struct io_state *s, uint64_t ns)
{
	double secs = (double)ns / 1e9;
	uint64_t total = s->total, nlb = a->nlb, slba = a->slba;
	char h[32];
	fprintf(stderr, "%s %" PRIu64 " bytes (%s, %" PRIu64 " block%s of %u B, LBA %" PRIu64 "..%" PRIu64
		", nsid %u) in %.3f s: %.3f GB/s\n",
		a->is_write ? "wrote" : "read", total, cli_human_bytes(total, h, sizeof(h)), nlb, nlb == 1 ? "" : "s",
		s->ni.lba_size, slba, slba + nlb - 1, a->nsid, secs, secs > 0 ? (double)total / secs / 1e9 : 0.0);
}

/* Close everything that was opened; a read's output file that this
 * command created is removed on an error. Returns rc, or the error of
 * closing the output. */
static int release(const struct io_args *a, struct io_state *s, int rc)
{
	if (s->qp && s->drained)
		gpunvme_qpair_destroy(s->qp);
	if (s->dma && s->drained)
		gpunvme_dma_free(s->ctrl, s->dma);
	free(s->slots);
	if (s->ctrl)
		gpunvme_close(s->ctrl);
	if (s->fd > 2 && close(s->fd) < 0 && !a->is_write && rc == 0)
		rc = cli_err(EXIT_RUNTIME, "closing '%s': %s", a->path, strerror(errno));
	if (rc && !a->is_write && !a->is_std && s->created)
		unlink(a->path);
	return rc;
}

static int run(int argc, char **argv, bool is_write)
{
	struct io_args a;
	int rc = parse_opts(argc, argv, is_write, &a);
	if (rc || a.help || (rc = check_args(&a)))
		return rc;
	struct io_state s;
	memset(&s, 0, sizeof(s));
	s.fd = -1;
	s.drained = true;
	if ((rc = open_file(&a, &s)) || (rc = open_device(&a, &s)) || (rc = check_file_size(&a, &s)) ||
	    (rc = setup_queue(&a, &s)))
		return release(&a, &s, rc);
	uint64_t t0 = cli_now_ns();
	rc = transfer(&a, &s, t0);
	if (rc == 0 && is_write)
		rc = finish_write(&a, &s);
	uint64_t t1 = cli_now_ns();
	if (rc)
		drain(&s);
	else if (!a.quiet)
		report(&a, &s, t1 - t0);
	return release(&a, &s, rc);
}

int cmd_read(int argc, char **argv) { return run(argc, argv, false); }
int cmd_write(int argc, char **argv) { return run(argc, argv, true); }
