/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A run of copies being gathered, shared by the application's staging rings
 * (stage_ring.h) and the DMA process's mover (server/dma_server.cu): pieces
 * whose source bytes follow each other join it where they continue it in GPU
 * memory (one longer row), or where they are its next row (the same width,
 * the run's pitch on: the second row sets the pitch). A run of one row is a
 * plain copy, of more a 2D copy (cudaMemcpy2DAsync). An md member's chunks,
 * read as strided segments (gpu.h), come as rows: 16 lanes of 512 KiB copies
 * moved 43.6 GB/s on the H200 one call each, 54.7 one 2D copy per 32
 * (`bench_gpu_bw -m lanes`, bench/results/emu-2026-11-29-s18).
 *
 * Where the source bytes are, and how long a run may grow, is the caller's:
 * it joins a piece only when its source follows the run's.
 */
#ifndef GPUNVME_EMU_CUDA_STRIDED_RUN_H
#define GPUNVME_EMU_CUDA_STRIDED_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A 2D copy's pitch at most: a limit of the device's (cudaDevAttrMaxPitch,
 * 2^31 - 1 on the H200); pieces further apart go as copies of their own. */
#define STRIDED_PITCH_MAX (1ull << 30)

/* len bytes for GPU memory at dev: rows rows of w bytes, pitch apart (one
 * row: w == len); len 0: no run */
struct strided_run {
	uint64_t dev, pitch;
	size_t len, w, rows;
};

static inline void strided_run_start(struct strided_run *r, uint64_t dev, size_t n)
{
	r->dev = dev;
	r->pitch = 0;
	r->len = r->w = n;
	r->rows = 1;
}

/* n bytes for dev, whose source follows the run's: joined (true) as the
 * next bytes of a one-row run, or (rows_ok) as its next row; else the run
 * stays as it is. */
static inline bool strided_run_join(struct strided_run *r, uint64_t dev, size_t n, bool rows_ok)
{
	if (r->rows == 1 && r->dev + r->len == dev) {
		r->len += n;
		r->w += n;
		return true;
	}
	if (!rows_ok || n != r->w ||
	    !(r->rows == 1 ? dev > r->dev + r->w && dev - r->dev <= STRIDED_PITCH_MAX : dev == r->dev + r->rows * r->pitch))
		return false;
	if (r->rows == 1)
		r->pitch = dev - r->dev;
	r->rows++;
	r->len += n;
	return true;
}

#endif
