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
	if (err == -EIO)
		return cli_err(EXIT_RUNTIME, "%s of LBA %" PRIu64 "..%" PRIu64 " failed: %s", what, s->slba,
			       s->slba + s->nlb - 1, gpunvme_status_str(status));
	const char *le = gpunvme_last_error();
	return cli_err(EXIT_RUNTIME, "%s of LBA %" PRIu64 "..%" PRIu64 " failed: %s", what, s->slba,
		       s->slba + s->nlb - 1, le && *le ? le : strerror(-err));
}

static int run(int argc, char **argv, bool is_write)
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
	uint64_t slba = 0, nlb = 0, chunk = DEF_CHUNK;
	uint32_t nsid = 1, depth = DEF_DEPTH, timeout_ms = 0;
	bool have_slba = false, have_nlb = false, allow_trailing = false, flush = true, quiet = false;
	const char *path = NULL;
	int c, rc;
	while ((c = cli_getopt(argc, argv, "s:n:d:qh", lo)) != -1) {
		switch (c) {
		case 's':
			if ((rc = cli_opt_u64("--slba", optarg, false, 0, UINT64_MAX, &slba)))
				return rc;
			have_slba = true;
			break;
		case 'N':
			if ((rc = cli_opt_u64("--nlb", optarg, false, 1, UINT64_MAX, &nlb)))
				return rc;
			have_nlb = true;
			break;
		case 'n':
			if ((rc = cli_opt_u32("--nsid", optarg, false, 1, 0xfffffffe, &nsid)))
				return rc;
			break;
		case 'O':
			if (is_write)
				return cli_usage_err("write takes --in FILE, not --out");
			path = optarg;
			break;
		case 'I':
			if (!is_write)
				return cli_usage_err("read takes --out FILE, not --in");
			path = optarg;
			break;
		case 'd': path = optarg; break;
		case 'C':
			if ((rc = cli_opt_u64("--chunk", optarg, true, 1, MAX_CHUNK, &chunk)))
				return rc;
			break;
		case 'D':
			if ((rc = cli_opt_u32("--depth", optarg, false, 1, MAX_DEPTH, &depth)))
				return rc;
			break;
		case 'T':
			if ((rc = cli_opt_u32("--timeout", optarg, false, 1, 3600000, &timeout_ms)))
				return rc;
			break;
		case 'A':
			if (!is_write)
				return cli_usage_err("--allow-trailing applies to write only");
			allow_trailing = true;
			break;
		case 'F':
			if (!is_write)
				return cli_usage_err("--no-flush applies to write only");
			flush = false;
			break;
		case 'q': quiet = true; break;
		case 'h': help(is_write); return 0;
		default: return EXIT_USAGE;
		}
	}
	const char *uri = cli_one_uri(argc, argv);
	if (!uri)
		return EXIT_USAGE;
	if (!have_slba)
		return cli_usage_err("missing --slba N (first LBA)");
	if (!have_nlb)
		return cli_usage_err("missing --nlb N (number of blocks)");
	if (!path)
		return cli_usage_err(is_write ? "missing --in FILE ('-' for stdin)"
					      : "missing --out FILE ('-' for stdout)");
	if ((uint64_t)depth * chunk > (1ull << 30))
		return cli_usage_err("--chunk %" PRIu64 " x --depth %u is more than 1 GiB of DMA buffer", chunk,
				     depth);
	if ((rc = cli_check_uri(uri)))
		return rc;

	/* ---- files, before the device is touched --------------------------- */
	int fd = -1;
	bool is_std = !strcmp(path, "-");
	if (is_std)
		path = is_write ? "<stdin>" : "<stdout>";  /* for messages */
	bool created = false;
	struct stat st;
	memset(&st, 0, sizeof(st));
	if (is_write) {
		if (is_std) {
			fd = 0;
		} else {
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				return cli_err(EXIT_RUNTIME, "cannot open input file '%s': %s", path,
					       strerror(errno));
		}
		if (fstat(fd, &st) < 0) {
			rc = cli_err(EXIT_RUNTIME, "cannot stat input '%s': %s", path, strerror(errno));
			goto out_fd;
		}
		if (S_ISDIR(st.st_mode)) {
			rc = cli_err(EXIT_RUNTIME, "input '%s' is a directory", path);
			goto out_fd;
		}
	} else {
		if (is_std) {
			if (isatty(1))
				return cli_usage_err("refusing to write binary data to a terminal: redirect "
						     "stdout or give --out FILE");
			fd = 1;
		} else {
			created = stat(path, &st) != 0;
			fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			if (fd < 0)
				return cli_err(EXIT_RUNTIME, "cannot create output file '%s': %s", path,
					       strerror(errno));
		}
	}

	/* ---- device and range -------------------------------------------------- */
	struct gpunvme_opts opts;
	gpunvme_opts_init(&opts);
	if (timeout_ms)
		opts.io_timeout_ms = timeout_ms;
	struct gpunvme_ctrl *ctrl = NULL;
	struct gpunvme_qpair *qp = NULL;
	uint8_t *dma = NULL;
	struct slot *slots = NULL;
	bool drained = true;
	if ((rc = cli_open(uri, &opts, &ctrl)))
		goto out_fd;
	struct gpunvme_ns_info ni;
	if ((rc = cli_ns(ctrl, nsid, &ni)) || (rc = cli_check_range(&ni, slba, nlb)))
		goto out;
	if (nlb > UINT64_MAX / ni.lba_size) {
		rc = cli_usage_err("--nlb %" PRIu64 ": too many bytes", nlb);
		goto out;
	}
	uint64_t total = nlb * ni.lba_size;
	if (chunk % ni.lba_size) {
		rc = cli_usage_err("--chunk %" PRIu64 " is not a multiple of the %u-byte LBA size", chunk,
				   ni.lba_size);
		goto out;
	}
	if (is_write && S_ISREG(st.st_mode)) {
		uint64_t fsz = (uint64_t)st.st_size;
		char h1[32], h2[32];
		if (fsz % ni.lba_size && fsz < total) {
			rc = cli_err(EXIT_RUNTIME, "input '%s' is %" PRIu64 " bytes, not a whole number of %u-byte "
				     "blocks; --nlb %" PRIu64 " needs exactly %" PRIu64 " bytes (%s)",
				     path, fsz, ni.lba_size, nlb, total, cli_human_bytes(total, h1, sizeof(h1)));
			goto out;
		}
		if (fsz < total) {
			rc = cli_err(EXIT_RUNTIME, "input '%s' is too short: %" PRIu64 " bytes (%s), but --nlb %" PRIu64
				     " of %u-byte blocks needs exactly %" PRIu64 " bytes (%s); nothing written",
				     path, fsz, cli_human_bytes(fsz, h2, sizeof(h2)), nlb, ni.lba_size, total,
				     cli_human_bytes(total, h1, sizeof(h1)));
			goto out;
		}
		if (fsz > total && !allow_trailing) {
			rc = cli_err(EXIT_RUNTIME, "input '%s' is longer than the transfer: %" PRIu64 " bytes, but --nlb %" PRIu64
				     " of %u-byte blocks is %" PRIu64 " bytes; nothing written (--allow-trailing "
				     "writes only the first %" PRIu64 " bytes)",
				     path, fsz, nlb, ni.lba_size, total, total);
			goto out;
		}
	}
	if (!is_write && !is_std) {
		struct stat ost;
		if (fstat(fd, &ost) == 0 && S_ISREG(ost.st_mode) && ftruncate(fd, 0) < 0) {
			rc = cli_err(EXIT_RUNTIME, "cannot truncate '%s': %s", path, strerror(errno));
			goto out;
		}
	}

	/* ---- buffer and queue ---------------------------------------------------- */
	uint64_t chunk_blocks = chunk / ni.lba_size;
	uint64_t nchunks = (nlb + chunk_blocks - 1) / chunk_blocks;
	if (depth > nchunks)
		depth = (uint32_t)nchunks;
	if (nchunks == 1)
		chunk_blocks = nlb;  /* small transfer: buffer just what is needed */
	size_t slot_bytes = (size_t)(chunk_blocks * ni.lba_size);
	dma = gpunvme_dma_alloc(ctrl, slot_bytes * depth);
	if (!dma) {
		char h[32];
		rc = cli_lib_err(-ENOMEM, "cannot allocate %s of DMA memory (try a smaller --chunk or --depth)",
				 cli_human_bytes((uint64_t)slot_bytes * depth, h, sizeof(h)));
		goto out;
	}
	slots = calloc(depth, sizeof(*slots));
	if (!slots) {
		rc = cli_err(EXIT_RUNTIME, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < depth; i++)
		slots[i].buf = dma + (size_t)i * slot_bytes;
	struct gpunvme_ctrl_info ci;
	uint32_t qdepth = 0;
	if (gpunvme_ctrl_info(ctrl, &ci) == 0) {
		uint64_t parts = ci.max_xfer ? (slot_bytes + ci.max_xfer - 1) / ci.max_xfer : 1;
		uint64_t want = parts * depth + 1;
		uint32_t lim = ci.mqes < 1024 ? ci.mqes : 1024;
		qdepth = want < 2 ? 2 : (want > lim ? lim : (uint32_t)want);
	}
	if ((rc = gpunvme_qpair_create(ctrl, qdepth, &qp)) < 0) {
		rc = cli_lib_err(rc, "cannot create an I/O queue pair");
		qp = NULL;
		goto out;
	}

	/* ---- the transfer ----------------------------------------------------- */
	const char *what = is_write ? "write" : "read";
	uint64_t next_lba = slba, end_lba = slba + nlb, retired = 0;
	uint64_t in_bytes = 0;  /* write: bytes taken from the input */
	uint32_t head = 0;
	uint64_t t0 = cli_now_ns();
	uint64_t stall_ns = (uint64_t)opts.io_timeout_ms * 1000000ull + 5000000000ull;
	uint64_t last_progress = t0;
	rc = 0;
	/* prime: every slot gets a chunk */
	for (uint32_t i = 0; i < depth && next_lba < end_lba; i++) {
		struct slot *s = &slots[i];
		s->slba = next_lba;
		s->nlb = end_lba - next_lba < chunk_blocks ? end_lba - next_lba : chunk_blocks;
		if (is_write) {
			size_t want = (size_t)(s->nlb * ni.lba_size);
			ssize_t n = cli_read_full(fd, s->buf, want);
			if (n < 0) {
				rc = cli_err(EXIT_RUNTIME, "reading '%s': %s", path, strerror((int)-n));
				break;
			}
			in_bytes += (uint64_t)n;
			if ((size_t)n < want) {
				rc = cli_err(EXIT_RUNTIME, "input '%s' ended after %" PRIu64 " bytes; --nlb %" PRIu64
					     " needs exactly %" PRIu64 " bytes (%" PRIu64 " blocks were written before)",
					     path, in_bytes, nlb, total, next_lba - slba);
				break;
			}
		}
		s->state = ST_BUSY;
		int e = is_write ? gpunvme_write(qp, nsid, s->buf, s->slba, s->nlb, slot_cb, s)
				 : gpunvme_read(qp, nsid, s->buf, s->slba, s->nlb, slot_cb, s);
		if (e) {
			s->state = ST_IDLE;
			rc = io_error(is_write ? "submitting write" : "submitting read", s, e, 0);
			break;
		}
		next_lba += s->nlb;
	}
	while (rc == 0 && retired < nlb) {
		int n = gpunvme_qpair_poll(qp, 0);
		if (n < 0) {
			rc = cli_lib_err(n, "%s: the controller failed", what);
			break;
		}
		uint64_t now = cli_now_ns();
		if (n > 0)
			last_progress = now;
		else if (now - last_progress > stall_ns) {
			rc = cli_err(EXIT_RUNTIME, "%s: no completion for %" PRIu64 " s; giving up", what,
				     (uint64_t)((now - last_progress) / 1000000000u));
			break;
		}
		while (rc == 0 && slots[head].state == ST_DONE) {
			struct slot *s = &slots[head];
			s->state = ST_IDLE;
			if (s->err) {
				rc = io_error(what, s, s->err, s->status);
				break;
			}
			if (!is_write) {
				ssize_t w = cli_write_all(fd, s->buf, (size_t)(s->nlb * ni.lba_size));
				if (w < 0) {
					char dst[300];
					snprintf(dst, sizeof(dst), "'%s'", path);
					rc = cli_write_err((int)w, dst);
					break;
				}
			}
			retired += s->nlb;
			if (next_lba < end_lba) {
				s->slba = next_lba;
				s->nlb = end_lba - next_lba < chunk_blocks ? end_lba - next_lba : chunk_blocks;
				if (is_write) {
					size_t want = (size_t)(s->nlb * ni.lba_size);
					ssize_t r = cli_read_full(fd, s->buf, want);
					if (r < 0) {
						rc = cli_err(EXIT_RUNTIME, "reading '%s': %s", path, strerror((int)-r));
						break;
					}
					in_bytes += (uint64_t)r;
					if ((size_t)r < want) {
						rc = cli_err(EXIT_RUNTIME, "input '%s' ended after %" PRIu64 " bytes; "
							     "--nlb %" PRIu64 " needs exactly %" PRIu64 " bytes (%" PRIu64
							     " blocks were written before)",
							     path, in_bytes, nlb, total, retired);
						break;
					}
				}
				s->state = ST_BUSY;
				int e = is_write ? gpunvme_write(qp, nsid, s->buf, s->slba, s->nlb, slot_cb, s)
						 : gpunvme_read(qp, nsid, s->buf, s->slba, s->nlb, slot_cb, s);
				if (e) {
					s->state = ST_IDLE;
					rc = io_error(is_write ? "submitting write" : "submitting read", s, e, 0);
					break;
				}
				next_lba += s->nlb;
			}
			head = (head + 1) % depth;
		}
	}
	/* a stream input must end exactly here */
	if (rc == 0 && is_write && !S_ISREG(st.st_mode) && !allow_trailing) {
		uint8_t extra;
		ssize_t r = cli_read_full(fd, &extra, 1);
		if (r > 0)
			rc = cli_err(EXIT_RUNTIME, "input '%s' holds more than the %" PRIu64 " bytes of --nlb %" PRIu64
				     " (all %" PRIu64 " blocks were written; --allow-trailing accepts a longer input)",
				     path, total, nlb, nlb);
	}
	if (rc == 0 && is_write && flush) {
		uint16_t stt = 0;
		int e = gpunvme_flush_sync(qp, nsid, &stt);
		if (e)
			rc = e == -EIO ? cli_err(EXIT_RUNTIME, "flush failed: %s", gpunvme_status_str(stt))
				       : cli_lib_err(e, "flush failed");
	}
	uint64_t t1 = cli_now_ns();

	/* on an error, wait for what is still in flight before freeing its memory */
	if (rc) {
		uint64_t tdrain = cli_now_ns();
		while (gpunvme_qpair_outstanding(qp) > 0) {
			if (gpunvme_qpair_poll(qp, 0) < 0 ||
			    cli_now_ns() - tdrain > (uint64_t)opts.io_timeout_ms * 1000000ull + 2000000000ull)
				break;
		}
		drained = gpunvme_qpair_outstanding(qp) == 0;
	}
	if (rc == 0 && !quiet) {
		double secs = (double)(t1 - t0) / 1e9;
		char h[32];
		fprintf(stderr, "%s %" PRIu64 " bytes (%s, %" PRIu64 " block%s of %u B, LBA %" PRIu64 "..%" PRIu64
			", nsid %u) in %.3f s: %.3f GB/s\n",
			is_write ? "wrote" : "read", total, cli_human_bytes(total, h, sizeof(h)), nlb, nlb == 1 ? "" : "s", ni.lba_size,
			slba, slba + nlb - 1, nsid, secs, secs > 0 ? (double)total / secs / 1e9 : 0.0);
	}

out:
	if (qp && drained)
		gpunvme_qpair_destroy(qp);
	if (dma && drained)
		gpunvme_dma_free(ctrl, dma);
	free(slots);
	if (ctrl)
		gpunvme_close(ctrl);
out_fd:
	if (fd > 2 && close(fd) < 0 && !is_write && rc == 0)
		rc = cli_err(EXIT_RUNTIME, "closing '%s': %s", path, strerror(errno));
	if (rc && !is_write && !is_std && created)
		unlink(path);
	return rc;
}

int cmd_read(int argc, char **argv) { return run(argc, argv, false); }
int cmd_write(int argc, char **argv) { return run(argc, argv, true); }
