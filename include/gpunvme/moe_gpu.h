/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The GPU expert cache: experts read by GPU threads as the router picks
 * them, with no host round trip between the router and the reads. Host side
 * (src/cuda/moe_gpu.cu); built with CUDA (GPUNVME_HAVE_CUDA).
 *
 * At open the host turns every expert of the index (moe.h) into NVMe
 * commands once: the expert's pieces, placed in a slot by
 * gpunvme_moe_place, become LBA runs of the volume's controllers (an md
 * array's members: each run names its member, whose GPU queues carry it),
 * split at each controller's MDTS; holes and unwritten ranges become
 * zero-fills. The tables live in GPU memory.
 *
 * gpunvme_gpu_experts_fetch() then queues three kernels on a stream and
 * returns: one thread decides (the ids the router wrote in GPU memory; hits,
 * victims among slots the request does not need by the host cache's rule,
 * the same code), a grid of threads issues the misses'
 * commands through the GPU queues (device.cuh) straight into the slots, and
 * one thread publishes the slots of the experts that arrived. Nothing waits
 * on the host: the compute that follows on the stream reads the slots.
 *
 * One stream at a time: fetches are ordered by their stream; two streams
 * fetching from one cache at once race. Slots: Tier 2 GPU memory (every
 * controller needs GPUNVME_CAP_DEVMEM_DMA), Tier 1 pinned host memory
 * mapped into the GPU (one controller: an md array's members would each
 * need to reach it).
 */
#ifndef GPUNVME_MOE_GPU_H
#define GPUNVME_MOE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/extents.h"
#include "gpunvme/moe.h"
#include "gpunvme/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_volume;
struct gpunvme_gpu_experts;

/* A slot a fetch could not fill (a failed read, a bad id, too many
 * experts): the compute must not use it. */
#define GPUNVME_GPU_EXPERTS_NO_SLOT 0xffffffffu
/* Experts one fetch may ask for (the router's k; 8 in the largest models). */
#define GPUNVME_GPU_EXPERTS_MAX_K 64

struct gpunvme_gpu_experts_opts {
	uint32_t slots;            /* experts resident at once (required) */
	enum gpunvme_tier tier;    /* GPUNVME_TIER_AUTO (default), 1 or 2 */
	uint32_t queues;           /* GPU queue pairs per controller; 0 (default): up to
				    * 4, fitted to what each controller has free */
	uint32_t depth;            /* entries per queue (default 256, fitted to CAP.MQES) */
	uint32_t threads;          /* reader threads per fetch (default 1024) */
	uint64_t timeout_ns;       /* per command (default 10 s) */
};
void gpunvme_gpu_experts_opts_init(struct gpunvme_gpu_experts_opts *o);

/*
 * A GPU expert cache over the model file whose extents (ext, n; its size
 * file_size) are on volume v, for index x (both must outlive it). Errors:
 * -EINVAL (bad options, a run not aligned to the controller's LBA size),
 * -EOPNOTSUPP (the tier asked for is not possible on this volume: the
 * reason and the tier to use), -ENOMEM, or the GPU queues' errors.
 */
int gpunvme_gpu_experts_open(struct gpunvme_volume *v, const struct gpunvme_moe_index *x,
			     const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
			     const struct gpunvme_gpu_experts_opts *o, struct gpunvme_gpu_experts **out);
void gpunvme_gpu_experts_close(struct gpunvme_gpu_experts *g);
enum gpunvme_tier gpunvme_gpu_experts_tier(const struct gpunvme_gpu_experts *g);

/*
 * Queue on `stream` (a cudaStream_t; NULL: the legacy default stream): make
 * experts d_ids[0..k) of MoE layer i resident and write their slots to
 * d_slots[0..k) (both GPU memory, or memory the GPU reads). A slot that
 * could not be filled reads GPUNVME_GPU_EXPERTS_NO_SLOT and the failure is
 * kept for gpunvme_gpu_experts_sync. Returns at once: -EINVAL for bad
 * arguments (i, k), a CUDA launch error.
 */
int gpunvme_gpu_experts_fetch(struct gpunvme_gpu_experts *g, uint32_t i, const uint32_t *d_ids, uint32_t k,
			      uint32_t *d_slots, void *stream);

/*
 * Slot memory as the compute sees it: piece p of the expert in slot s is at
 * base + d_piece_off[s * n_proj + p] (a GPU array the fetch kernels keep
 * current: the expert in a slot decides where its pieces are).
 */
void gpunvme_gpu_experts_layout(const struct gpunvme_gpu_experts *g, uint8_t **base, const uint64_t **d_piece_off);
/* Bytes of one slot (slot s starts at base + s * slot_bytes). */
uint64_t gpunvme_gpu_experts_slot_bytes(const struct gpunvme_gpu_experts *g);

struct gpunvme_gpu_experts_stats {
	struct gpunvme_expert_cache_stats cache; /* requests, hits, misses, evictions, bytes read */
	uint64_t commands;                       /* NVMe reads issued */
	uint64_t stall_ns;                       /* the fetches that read, decide to publish: what the stream waited */
	uint64_t stalled;                        /* how many fetches read something */
};

/*
 * Wait (bounded by the timeout) for what `stream` holds, then collect: 0
 * when every fetch since the last sync filled its slots, else the first
 * failure (-EIO with the NVMe status or device error in the message,
 * -EINVAL for an expert id out of range, -ENOSPC for more distinct experts
 * than slots, -ETIMEDOUT). After a command timeout the GPU queues are
 * recovered before returning, so the next fetch can run. st (may be NULL)
 * gets the statistics.
 */
int gpunvme_gpu_experts_sync(struct gpunvme_gpu_experts *g, void *stream, struct gpunvme_gpu_experts_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_MOE_GPU_H */
