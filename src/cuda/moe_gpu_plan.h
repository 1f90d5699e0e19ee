/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU expert cache's internals (src/cuda/moe_gpu.cu), shared with its
 * host-side test (tests/gpu/test_moe_gpu_plan.cu, which runs without a GPU):
 * the command plan built at open, and the replacement policy the decide and
 * publish kernels run, callable on the host too.
 */
#ifndef GPUNVME_CUDA_MOE_GPU_PLAN_H
#define GPUNVME_CUDA_MOE_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/device.cuh"
#include "gpunvme/extents.h"
#include "gpunvme/moe.h"
#include "gpunvme/moe_gpu.h"

/* A device code for "more distinct experts than slots" and "expert id out
 * of range", beside device.cuh's GPUNVME_DEV_E*. */
#define MG_ENOSPC (-28)
#define MG_EBADID (-22)

/* Zero-fills are cut at this size so that a large hole is shared by many
 * threads. */
#define MG_ZERO_PIECE (64u << 10)

/* One command (nlb > 0: a read of member `member` into the slot at `off`)
 * or one zero-fill (nlb == 0: `zero` bytes at `off`). */
struct mg_run {
	uint64_t slba;
	uint64_t off;
	uint32_t nlb;
	uint32_t member;
	uint32_t zero;
	uint32_t pad;
};

struct mg_member {
	struct gpunvme_dev_queues q;
	struct gpunvme_dev_buf b;
};

/* The cache's state, in GPU memory; the host reads it at sync. */
struct mg_state {
	unsigned long long clock;
	uint64_t since_age;        /* requests since the counts were halved (src/moe/policy.h) */
	unsigned long long requests, hits, misses, evictions, bytes_read, commands;
	/* the stall: %globaltimer when the current fetch's decide found
	 * misses, and the sum over such fetches of decide to publish (the
	 * time compute queued behind them on the stream waits for reads) */
	unsigned long long t_start, stall_ns, stalled;
	int status;        /* first failure since the last sync, 0 */
	uint32_t n_todo;   /* misses of the current fetch */
	uint32_t todo_key[GPUNVME_GPU_EXPERTS_MAX_K];
	uint32_t todo_slot[GPUNVME_GPU_EXPERTS_MAX_K];
	int todo_fail[GPUNVME_GPU_EXPERTS_MAX_K];
};

/* What the kernels receive, by value. */
struct mg_args {
	struct mg_state *st;
	int32_t *where;            /* [keys]: slot or -1 */
	uint32_t *freq;            /* [keys]: requests, the policy's counts */
	uint32_t keys;
	int64_t *slot_key;         /* [slots]: key or -1 */
	unsigned long long *slot_used, *slot_mark;
	uint64_t *slot_off;        /* [slots][n_proj]: piece offsets from base (layout) */
	const uint32_t *run_first; /* [keys + 1] */
	const struct mg_run *runs;
	const uint64_t *pos;       /* [keys][n_proj]: gpunvme_moe_place */
	const uint64_t *ebytes;    /* [keys]: bytes of each expert */
	const struct mg_member *mem;
	uint8_t *base;             /* slot memory, as the GPU addresses it */
	uint64_t slot_bytes;
	uint32_t slots, n_experts, n_proj, layer;
	const uint32_t *ids;
	uint32_t *out;
	uint32_t k;
	uint64_t timeout_ns;
};

/* One controller of the volume (an md member, or the one): the file's
 * extents on it (md: gpunvme_md_member_extents), its LBA size and MDTS. */
struct moe_gpu_member_map {
	struct gpunvme_extent *ext;
	size_t n;
	uint32_t lba_shift, max_blocks;
};

/* Every expert's commands: expert key = MoE layer * n_experts + expert;
 * its runs are runs[first[key] .. first[key + 1]), slot offsets from the
 * slot's start; pos: gpunvme_moe_place per key; ebytes: its bytes. */
struct moe_gpu_plan {
	uint64_t *pos;
	uint64_t *ebytes;
	uint32_t *first;
	struct mg_run *runs;
	size_t n_runs;
	uint64_t slot_bytes;
};

/* -EINVAL (a run off the member's LBA size), -EFBIG, -ENOMEM. */
int moe_gpu_plan_build(const struct gpunvme_moe_index *x, const struct moe_gpu_member_map *mm, uint32_t nmem,
		       struct moe_gpu_plan *p);
void moe_gpu_plan_free(struct moe_gpu_plan *p);

/* The policy (src/moe/policy.h, as the host cache's), one thread: decide writes the slots and the misses (st->todo),
 * publish makes the arrived ones resident (todo_fail: not). The kernels run
 * them on the GPU; on the host they take host arrays. */
__host__ __device__ void moe_gpu_decide(const struct mg_args *a);
__host__ __device__ void moe_gpu_publish(const struct mg_args *a);

#endif
