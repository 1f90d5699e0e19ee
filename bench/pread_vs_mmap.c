/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One pass over a page-cached file in pieces into a reused buffer per
 * thread, by memcpy from a fresh MAP_SHARED mapping (what the emulator's
 * image namespaces did) or by pread (what its staging does now): the cost
 * of the minor fault a first touch of each 4 KiB page of the mapping takes
 * (bench/EMU_NOTES.md, 2026-11-28), and how far THREADS threads (the
 * emulator's workers, 8 by default on 16 cores) take a page-cached read,
 * piece i read by thread i % THREADS as the workers share a load's
 * commands. Is the host's page cache the limit of a staged Tier 2 load?
 * (EMU_NOTES, session 10: 22 GB/s merged.) Warm the page cache first.
 *
 *   cc -O2 -pthread -o /tmp/pvm bench/pread_vs_mmap.c
 *   cat IMG >/dev/null; /tmp/pvm IMG pread 8 512; /tmp/pvm IMG mmap 8 512
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct {
	int fd;
	const char *map; /* NULL: pread */
	size_t n, piece;
	unsigned threads;
} job;

struct worker {
	pthread_t th;
	unsigned id;
	char *buf;
	int err;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	for (size_t o = (size_t)w->id * job.piece; o < job.n; o += (size_t)job.threads * job.piece) {
		if (job.map) {
			memcpy(w->buf, job.map + o, job.piece);
			continue;
		}
		for (size_t d = 0; d < job.piece;) {
			ssize_t r = pread(job.fd, w->buf + d, job.piece - d, (off_t)(o + d));
			if (r <= 0) {
				w->err = 1;
				return NULL;
			}
			d += (size_t)r;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5 || (strcmp(argv[2], "mmap") && strcmp(argv[2], "pread"))) {
		fprintf(stderr, "usage: %s FILE mmap|pread [THREADS (1)] [PIECE_KIB (4096)]\n", argv[0]);
		return 2;
	}
	job.threads = argc > 3 ? (unsigned)atoi(argv[3]) : 1;
	job.piece = (argc > 4 ? (size_t)atol(argv[4]) : 4096) << 10;
	if (job.threads < 1 || job.threads > MAX_THREADS || job.piece < 4096 || job.piece % 4096) {
		fprintf(stderr, "%s: THREADS is 1 to %d, PIECE_KIB a multiple of 4\n", argv[0], MAX_THREADS);
		return 2;
	}
	job.fd = open(argv[1], O_RDONLY);
	struct stat st;
	if (job.fd < 0 || fstat(job.fd, &st) < 0) {
		perror(argv[1]);
		return 1;
	}
	job.n = (size_t)st.st_size / job.piece * job.piece;
	if (!job.n) {
		fprintf(stderr, "%s: smaller than one piece (%zu bytes)\n", argv[1], job.piece);
		return 1;
	}
	if (!strcmp(argv[2], "mmap")) {
		job.map = mmap(NULL, job.n, PROT_READ, MAP_SHARED, job.fd, 0);
		if (job.map == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
	}
	static struct worker w[MAX_THREADS];
	for (unsigned i = 0; i < job.threads; i++) {
		w[i].id = i;
		w[i].buf = aligned_alloc(4096, job.piece);
		if (!w[i].buf) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		memset(w[i].buf, 1, job.piece); /* the destination's faults are not counted */
	}
	double t = now();
	for (unsigned i = 0; i < job.threads; i++)
		if (pthread_create(&w[i].th, NULL, run, &w[i])) {
			fprintf(stderr, "cannot start a thread\n");
			return 1;
		}
	int err = 0;
	for (unsigned i = 0; i < job.threads; i++) {
		pthread_join(w[i].th, NULL);
		err |= w[i].err;
	}
	t = now() - t;
	if (err) {
		fprintf(stderr, "%s: a read failed or met the end of the file\n", argv[1]);
		return 1;
	}
	printf("%s %u threads, %zu KiB pieces: %.2f GB in %.3f s = %.2f GB/s\n", argv[2], job.threads, job.piece >> 10,
	       (double)job.n / 1e9, t, (double)job.n / 1e9 / t);
	return 0;
}
