/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * bench_fs_index: how long indexing a whole file system takes through the
 * on-disk decoders: walk every directory from the root, stat every inode and
 * fetch every regular file's extents (what a loader does before it hands a
 * file-offset -> LBA table to the GPU). Results: bench/results/fs-index-2026-11-22/README.md.
 *
 *   bench_fs_index IMAGE            image file, pread (gpunvme_blkdev_open_file)
 *   bench_fs_index emu:IMAGE        through the driver (gpunvme_blkdev_open_ns)
 *   options: -r N  repeat N times (report each and the best)
 *
 * Prints: fs type, directories, files, other inodes, extents, bytes mapped,
 * seconds. The walk is iterative (an explicit stack of inode numbers), so a
 * deep tree costs no C stack.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"

struct walk {
	struct gpunvme_fs *fs;
	uint64_t *stack;
	size_t n, cap;
	uint64_t dirs, files, other, extents, mapped;
	int err;
};

static int push(struct walk *w, uint64_t ino)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 1024;
		uint64_t *s = realloc(w->stack, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		w->stack = s;
		w->cap = cap;
	}
	w->stack[w->n++] = ino;
	return 0;
}

static int entry_cb(void *arg, const char *name, size_t namelen, uint64_t ino, int ftype)
{
	struct walk *w = arg;
	(void)ftype;
	if ((namelen == 1 && name[0] == '.') || (namelen == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	/* stat every inode, whatever the directory entry's type says */
	struct gpunvme_stat st;
	int rc = gpunvme_fs_stat(w->fs, ino, &st);
	if (rc) {
		fprintf(stderr, "bench_fs_index: stat of inode %" PRIu64 " (%.*s): %s\n", ino, (int)namelen, name,
			gpunvme_last_error());
		return w->err = rc;
	}
	switch (st.mode & 0170000) {
	case 0040000:
		w->dirs++;
		if ((rc = push(w, ino)))
			return w->err = rc;
		break;
	case 0100000: {
		struct gpunvme_extent *x = NULL;
		size_t n = 0;
		if ((rc = gpunvme_fs_extents(w->fs, ino, &x, &n))) {
			fprintf(stderr, "bench_fs_index: extents of inode %" PRIu64 " (%.*s): %s\n", ino, (int)namelen,
				name, gpunvme_last_error());
			return w->err = rc;
		}
		w->files++;
		w->extents += n;
		for (size_t i = 0; i < n; i++)
			w->mapped += x[i].length;
		free(x);
		break;
	}
	default:
		w->other++;
	}
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static bool is_uri(const char *s)
{
	return !strncmp(s, "emu:", 4) || !strncmp(s, "vfio:", 5) || !strncmp(s, "uio:", 4) || !strncmp(s, "pci:", 4);
}

/* one full index; open and close included in the time (a loader pays them) */
static int index_once(const char *src, bool quiet, double *secs)
{
	struct gpunvme_ctrl *c = NULL;
	struct gpunvme_blkdev dev;
	struct gpunvme_fs *fs = NULL;
	struct walk w = {0};
	int rc;
	double t0 = now();
	if (is_uri(src)) {
		if ((rc = gpunvme_open(src, NULL, &c)))
			goto err;
		if ((rc = gpunvme_blkdev_open_ns(c, 1, &dev))) {
			gpunvme_close(c);
			goto err;
		}
	} else if ((rc = gpunvme_blkdev_open_file(src, &dev))) {
		goto err;
	}
	double t_open = now();
	uint64_t root;
	if ((rc = gpunvme_fs_open(&dev, 0, &fs)) || (rc = gpunvme_fs_lookup(fs, "/", &root)))
		goto out;
	w.fs = fs;
	w.dirs = 1;
	if ((rc = push(&w, root)))
		goto out;
	while (w.n) {
		uint64_t ino = w.stack[--w.n];
		rc = gpunvme_fs_readdir(fs, ino, entry_cb, &w);
		if (w.err) {
			rc = w.err;
			goto out;
		}
		if (rc < 0) {
			fprintf(stderr, "bench_fs_index: readdir of inode %" PRIu64 ": %s\n", ino,
				gpunvme_last_error());
			w.err = rc;
			goto out;
		}
	}
	rc = 0;
out:;
	/* ops names are static strings: still valid after close */
	const char *type = fs ? gpunvme_fs_type(fs) : "?";
	if (rc && !w.err)
		fprintf(stderr, "bench_fs_index: %s: %s\n", src, gpunvme_last_error());
	gpunvme_fs_close(fs);
	gpunvme_blkdev_close(&dev);
	if (c)
		gpunvme_close(c);
	*secs = now() - t0;
	if (!rc && !quiet)
		printf("%s: %s, %" PRIu64 " directories, %" PRIu64 " files, %" PRIu64 " other, %" PRIu64
		       " extents, %.1f MiB mapped, %.3f s (open %.3f s)\n",
		       src, type, w.dirs, w.files, w.other, w.extents,
		       w.mapped / 1048576.0, *secs, t_open - t0);
	free(w.stack);
	return rc;
err:
	fprintf(stderr, "bench_fs_index: %s: %s\n", src, gpunvme_last_error());
	return rc;
}

int main(int argc, char **argv)
{
	int reps = 1;
	const char *src = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-r") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (argv[i][0] == '-' || src)
			return fprintf(stderr, "usage: bench_fs_index [-r N] IMAGE|emu:IMAGE\n"), 2;
		else
			src = argv[i];
	}
	if (!src || reps < 1)
		return fprintf(stderr, "usage: bench_fs_index [-r N] IMAGE|emu:IMAGE\n"), 2;
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double s;
		if (index_once(src, false, &s))
			return 1;
		if (s < best)
			best = s;
	}
	if (reps > 1)
		printf("best of %d: %.3f s\n", reps, best);
	return 0;
}
