/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One pass over a page-cached file in 4 MiB pieces into a reused buffer,
 * by memcpy from a fresh MAP_SHARED mapping (what the emulator's image
 * namespaces and staging lanes do) or by pread: the cost of the minor fault
 * a first touch of each 4 KiB page of the mapping takes (bench/EMU_NOTES.md,
 * 2026-11-28). Warm the page cache first.
 *
 *   cc -O2 -o /tmp/pread_vs_mmap bench/pread_vs_mmap.c
 *   cat IMG >/dev/null; /tmp/pread_vs_mmap IMG mmap; /tmp/pread_vs_mmap IMG pread
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PIECE (4u << 20)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[2], "mmap") && strcmp(argv[2], "pread"))) {
		fprintf(stderr, "usage: %s FILE mmap|pread\n", argv[0]);
		return 2;
	}
	int fd = open(argv[1], O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		perror(argv[1]);
		return 1;
	}
	const size_t n = (size_t)st.st_size / PIECE * PIECE;
	char *buf = aligned_alloc(4096, PIECE);
	if (!buf || !n) {
		fprintf(stderr, "%s: no memory, or smaller than %u bytes\n", argv[1], PIECE);
		return 1;
	}
	memset(buf, 1, PIECE); /* the destination's faults are not counted */
	double t;
	if (!strcmp(argv[2], "mmap")) {
		char *p = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		t = now();
		for (size_t o = 0; o < n; o += PIECE)
			memcpy(buf, p + o, PIECE);
		t = now() - t;
	} else {
		t = now();
		for (size_t o = 0; o < n; o += PIECE)
			for (size_t d = 0; d < PIECE;) {
				ssize_t r = pread(fd, buf + d, PIECE - d, (off_t)(o + d));
				if (r <= 0) {
					perror("pread");
					return 1;
				}
				d += (size_t)r;
			}
		t = now() - t;
	}
	printf("%s: %.2f GB in %.3f s = %.2f GB/s\n", argv[2], (double)n / 1e9, t, (double)n / 1e9 / t);
	return 0;
}
