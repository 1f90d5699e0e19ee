/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Randomized check of the CPU data path under queue pressure: many DMA
 * buffers, several requests of 1..64 commands outstanding on a queue pair
 * with fewer free slots than commands, submits interleaved with polls, and
 * every byte of every buffer compared with a model (targets exact,
 * everything else untouched). Uses only the public API, so the same code
 * runs against the embedded emulator (tests/io) and against QEMU's
 * controller inside the guest (tests/qemu/qemu_driver.c).
 */
#ifndef GPUNVME_TEST_RANDIO_H
#define GPUNVME_TEST_RANDIO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gpunvme/gpunvme.h"

struct randio_opts {
	uint32_t nsid;
	uint64_t seed;
	uint32_t min_depth, max_depth; /* each depth in this range gets a queue pair */
	uint32_t rounds;               /* per depth: drain + full check after each */
	uint32_t ops;                  /* submissions per round */
	uint32_t max_cmds;             /* commands per request: 1..max_cmds */
	uint64_t region_bytes;         /* namespace bytes used from LBA 0 (capped by nsze) */
	uint32_t nbufs;
	bool writes;                   /* writes too (the region is overwritten) */
	uint32_t timeout_ms;           /* bound on each drain */
};

void randio_defaults(struct randio_opts *o);

/* 0 when every check held; -1 after printing what went wrong to `log`. */
int randio_run(struct gpunvme_ctrl *c, const struct randio_opts *o, FILE *log);

#endif
