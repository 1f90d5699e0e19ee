/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * blkbench DEV lat|bw SECONDS: a block device read the way `gpunvme perf`
 * reads a namespace, for the benchmark of the kernel's nvme-tcp host
 * against ours (tests/qemu/nvmet_guest.sh bench). O_DIRECT, so the page
 * cache plays no part.
 *   lat  one thread, 4 KiB random reads, one at a time (QD1): IOPS and
 *        latency (average, p50, p99) in microseconds
 *   bw   8 threads, each reading 128 KiB blocks in its own slice (QD8):
 *        GB/s
 * Output: one line of key=value pairs.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <linux/fs.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

struct bw_arg {
	int fd;
	uint64_t start, len;
	double until;
	uint64_t bytes;
	int err;
};

static void *bw_thread(void *p)
{
	struct bw_arg *a = p;
	void *buf;
	if (posix_memalign(&buf, 4096, 131072)) {
		a->err = 1;
		return NULL;
	}
	uint64_t off = 0;
	while (now() < a->until) {
		if (pread(a->fd, buf, 131072, (off_t)(a->start + off)) != 131072) {
			a->err = 1;
			break;
		}
		a->bytes += 131072;
		off = (off + 131072) % a->len;
	}
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4 || (strcmp(argv[2], "lat") && strcmp(argv[2], "bw"))) {
		fprintf(stderr, "usage: blkbench DEV lat|bw SECONDS\n");
		return 2;
	}
	double secs = atof(argv[3]);
	int fd = open(argv[1], O_RDONLY | O_DIRECT);
	uint64_t size = 0;
	if (fd < 0 || ioctl(fd, BLKGETSIZE64, &size) || size < (64u << 20)) {
		fprintf(stderr, "blkbench: %s: cannot open, or smaller than 64 MiB\n", argv[1]);
		return 1;
	}
	if (!strcmp(argv[2], "lat")) {
		void *buf;
		if (posix_memalign(&buf, 4096, 4096))
			return 1;
		uint32_t cap = 1u << 22, n = 0;
		uint32_t *us = malloc(cap * sizeof(*us));
		uint64_t x = 88172645463325252ull, blocks = size / 4096;
		double t0 = now(), until = t0 + secs, sum = 0;
		while (n < cap) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			double a = now();
			if (a >= until)
				break;
			if (pread(fd, buf, 4096, (off_t)((x % blocks) * 4096)) != 4096) {
				fprintf(stderr, "blkbench: read failed\n");
				return 1;
			}
			double d = (now() - a) * 1e6;
			us[n++] = (uint32_t)d;
			sum += d;
		}
		double el = now() - t0;
		qsort(us, n, sizeof(*us), cmp_u32);
		printf("ios=%u iops=%.0f avg_us=%.1f p50_us=%u p99_us=%u\n", n, n / el, n ? sum / n : 0, n ? us[n / 2] : 0,
		       n ? us[(uint64_t)n * 99 / 100] : 0);
		return 0;
	}
	struct bw_arg a[8];
	pthread_t th[8];
	double t0 = now();
	uint64_t slice = size / 8 / 131072 * 131072;
	for (int i = 0; i < 8; i++) {
		a[i] = (struct bw_arg){ fd, (uint64_t)i * slice, slice, t0 + secs, 0, 0 };
		pthread_create(&th[i], NULL, bw_thread, &a[i]);
	}
	uint64_t bytes = 0;
	int err = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		bytes += a[i].bytes;
		err |= a[i].err;
	}
	double el = now() - t0;
	if (err) {
		fprintf(stderr, "blkbench: read failed\n");
		return 1;
	}
	printf("bytes=%llu gbps=%.3f\n", (unsigned long long)bytes, bytes / el / 1e9);
	return 0;
}
