/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What the driver itself spends per 4 KiB read: run under callgrind with
 * --toggle-collect on gpunvme_read and gpunvme_qpair_poll (see
 * bench/callgrind_driver.sh), so only submission and completion count, not
 * the emulator. Each poll is called only once the emulator has posted the
 * completions (watched through the emulator's per-queue counter), so no
 * empty polls are counted either.
 *   bench_driver_instr [-n READS] [-b BATCH]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctrl/ctrl_emu.h" /* the emulator behind the controller */
#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"

static void cb(void *arg, const struct gpunvme_cpl *cpl)
{
	int *errs = arg;
	if (cpl->err)
		(*errs)++;
}

int main(int argc, char **argv)
{
	long n = 20000, batch = 1;
	int opt;
	while ((opt = getopt(argc, argv, "n:b:")) != -1) {
		if (opt == 'n')
			n = atol(optarg);
		else if (opt == 'b')
			batch = atol(optarg);
		else {
			fprintf(stderr, "usage: %s [-n READS] [-b BATCH]\n", argv[0]);
			return 2;
		}
	}
	if (n <= 0 || batch <= 0 || batch > 60) {
		fprintf(stderr, "bad -n or -b (batch 1..60)\n");
		return 2;
	}
	struct gpunvme_ctrl *c;
	if (gpunvme_open("emu:null:1G?lbads=12", NULL, &c)) {
		fprintf(stderr, "open: %s\n", gpunvme_last_error());
		return 1;
	}
	struct gpunvme_qpair *qp;
	if (gpunvme_qpair_create(c, 64, &qp)) {
		fprintf(stderr, "qpair: %s\n", gpunvme_last_error());
		return 1;
	}
	struct gpunvme_emu *emu = gpunvme_ctrl_emu(c);
	uint8_t *buf = gpunvme_dma_alloc(c, 64 * 4096);
	int errs = 0;
	uint64_t posted = gpunvme_emu_sq_commands(emu, 1);
	long done = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (done < n) {
		for (long i = 0; i < batch; i++)
			if (gpunvme_read(qp, 1, buf + i * 4096, (uint64_t)((done + i) * 7 % 262144), 1, cb, &errs)) {
				fprintf(stderr, "read: %s\n", gpunvme_last_error());
				return 1;
			}
		posted += (uint64_t)batch;
		/* wait, outside the measured functions, until the emulator has
		 * posted all of them: then one poll reaps the batch */
		while (gpunvme_emu_sq_commands(emu, 1) < posted) {
			struct timespec ts = { 0, 20000 };
			nanosleep(&ts, NULL);
		}
		long got = 0;
		while (got < batch) {
			int rc = gpunvme_qpair_poll(qp, 0);
			if (rc < 0) {
				fprintf(stderr, "poll: %s\n", gpunvme_last_error());
				return 1;
			}
			got += rc;
		}
		done += batch;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	printf("reads %ld batch %ld errors %d wall %.3f s\n", done, batch, errs, s);
	gpunvme_qpair_destroy(qp);
	gpunvme_close(c);
	return errs ? 1 : 0;
}
