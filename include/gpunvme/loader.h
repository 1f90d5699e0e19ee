/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Layer loader: stream byte ranges of a file that lives on an NVMe namespace
 * (located through its extents, no mount) into GPU memory (Tier 2), pinned
 * host memory the GPU reads (Tier 1), or host DMA memory through the CPU
 * data path (no GPU). Seed 003's three calls, init / load_layer / destroy,
 * plus an asynchronous form on a CUDA stream.
 *
 * Byte ranges need no alignment: the blocks that hold the first and last
 * bytes go through a small bounce buffer; every block in between is DMAed
 * straight into the destination, provided the destination address and the
 * file offset agree modulo 4 (NVMe PRP entries are dword aligned, §4.3).
 * gpunvme_layer_loader_alloc() hands out memory placed that way; any other
 * destination still works but is staged through the bounce buffer and
 * copied (a device-to-device copy for GPU memory).
 */
#ifndef GPUNVME_LOADER_H
#define GPUNVME_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"
#include "gpunvme/model.h"
#include "gpunvme/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_loader_gpu_ops; /* gpu.h: gpunvme_loader_gpu_backend() */

struct gpunvme_loader_opts {
	/* GPUNVME_TIER_AUTO: the tier policy picks (tier.h: with the CUDA
	 * backend in opts.gpu, Tier 2 or 1 by the controllers' capabilities;
	 * without, the CPU tier). An explicit GPU tier the controllers cannot
	 * do is -EOPNOTSUPP naming the tier to use. gpunvme_layer_loader_tier()
	 * says which runs. */
	enum gpunvme_tier tier;
	/* 0 = fit to the controller: 8 queue pairs (or, where the controller
	 * says how many queues it serves at once, gpunvme_ctrl_info's
	 * io_parallel, the smallest multiple of that from 8, 16 at most: the
	 * emulator's workers), as many as are
	 * free (gpunvme_io_queues_free); 256 entries at most, CAP.MQES + 1.
	 * More queues than are free: the free ones. A depth the controller
	 * does not allow: -EINVAL. */
	uint32_t queues;
	uint32_t depth;
	/* Each load (default 30000). The CPU path fails a load only once this
	 * has passed and no read completed for as long either (a load that
	 * progresses slowly on a shared, busy controller goes on); the GPU
	 * tiers bound each command's wait by it. */
	uint32_t timeout_ms;
	/* A synchronous load that fails is tried again, at most this many
	 * times (default 2), after recovering the queues: the abort step and,
	 * if needed, a controller reset on the CPU path (gpunvme_reset: other
	 * queue pairs of the controller see their commands fail), the GPU
	 * queues re-created in place on the GPU tiers. Not retried: a status
	 * with Do Not Retry set (§4.6.1.2), a device that is gone, bad
	 * arguments. Then the load fails with the byte range and the status. */
	uint32_t retries;
	/* Tiers 1 and 2 need the CUDA backend of libgpunvme_cuda; NULL with a
	 * GPU tier is -ENOTSUP "built without CUDA". */
	const struct gpunvme_loader_gpu_ops *gpu;
};

void gpunvme_loader_opts_init(struct gpunvme_loader_opts *o);

struct gpunvme_layer_loader;

/*
 * A loader for one file: its extents on namespace nsid (byte units, sorted,
 * as gpunvme_fs_extents returns them; the table is copied) and its size.
 * Extents past the end of the namespace are -ERANGE.
 */
int gpunvme_layer_loader_init(struct gpunvme_ctrl *c, uint32_t nsid, const struct gpunvme_extent *ext, size_t n,
			      uint64_t file_size, const struct gpunvme_loader_opts *opts,
			      struct gpunvme_layer_loader **out);
/*
 * A loader for a file on an md array (gpunvme_md_assemble): member k (as
 * passed to assemble) is namespace nsids[k] of controller ctrls[k]
 * (controllers may repeat: namespaces of one controller). ext are the
 * file's extents on the array. Each member gets its own loader with its own
 * queues (GPU queues on every member controller on the GPU tiers) and
 * reads only the chunks it holds, straight into the destination; holes are
 * zero-filled once. Loads, memory and statistics work as for one namespace;
 * the members' work runs one member after the other (on one stream on the
 * GPU tiers).
 */
int gpunvme_layer_loader_init_md(struct gpunvme_ctrl *const *ctrls, const uint32_t *nsids, const struct gpunvme_md *md,
				 const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
				 const struct gpunvme_loader_opts *opts, struct gpunvme_layer_loader **out);
/*
 * The loader for a file of a volume (volume.h): on an md array one loader
 * per member (gpunvme_layer_loader_init_md), else on the volume's
 * controller and namespace. ext are the file's extents as the volume's
 * file system gives them (partition offset included). An image file opened
 * without a controller cannot be loaded: -EOPNOTSUPP.
 */
struct gpunvme_volume;
int gpunvme_layer_loader_init_volume(struct gpunvme_volume *v, const struct gpunvme_extent *ext, size_t n,
				     uint64_t file_size, const struct gpunvme_loader_opts *opts,
				     struct gpunvme_layer_loader **out);
void gpunvme_layer_loader_destroy(struct gpunvme_layer_loader *l);
/*
 * Point the loader at another file of the same namespace (or md array):
 * its extents (copied, checked as init checks them) and size. Its queues,
 * bounce buffer and memory stay, so a caller that reads several files in
 * turn (a checkpoint's shards) sets a loader up once. Loads already queued
 * keep the file they were queued for (their commands are built); loads
 * from here on read the new one. On an error the loader keeps its file.
 */
int gpunvme_layer_loader_retarget(struct gpunvme_layer_loader *l, const struct gpunvme_extent *ext, size_t n,
				  uint64_t file_size);
enum gpunvme_tier gpunvme_layer_loader_tier(const struct gpunvme_layer_loader *l);
/* Give the loader's I/O queues back to the controller (no load may be in
 * flight); the next load takes them again. For a controller that granted
 * too few queues for the loader and another reader at once. */
int gpunvme_layer_loader_release_queues(struct gpunvme_layer_loader *l);

/*
 * Destination memory of the loader's tier (GPU memory, mapped pinned host
 * memory, or host DMA memory) for `len` bytes that will receive the file
 * range starting at `file_off`: the returned address is congruent to
 * file_off modulo 4096, so nothing but the first and last block is bounced.
 * On Tier 1 the returned pointer is the host address; the GPU's is
 * gpunvme_layer_loader_dev_ptr(). NULL on failure (message set).
 */
void *gpunvme_layer_loader_alloc(struct gpunvme_layer_loader *l, uint64_t file_off, size_t len);
/*
 * Give loader memory back. On Tier 2 the loader keeps it (at most 8 blocks
 * and a quarter of the GPU's memory) for its next allocation of about the
 * same size, which then costs no cudaMalloc and, on the emulator, no new
 * map in its DMA process; kept memory is freed at destroy, and at once when
 * one of the loader's allocations fails.
 */
void gpunvme_layer_loader_free(struct gpunvme_layer_loader *l, void *p);
void *gpunvme_layer_loader_dev_ptr(struct gpunvme_layer_loader *l, void *p);

/*
 * Caller memory as a direct DMA target (like cuFileBufRegister): Tier 2
 * cudaMalloc'ed memory, Tier 1 gpunvme_dma_alloc memory. Registration is
 * not stream-ordered: call it while none of this loader's loads is queued.
 * Kept until destroy. Unregistered GPU memory still works on Tier 2, through
 * the bounce buffer and a device-to-device copy.
 */
int gpunvme_layer_loader_register(struct gpunvme_layer_loader *l, void *p, size_t len);

/*
 * Load file bytes [off, off + len) into dst and wait. dst: GPU memory
 * (Tier 2; any cudaMalloc'ed pointer, or loader memory), the host address
 * of loader memory (Tier 1), host memory (CPU tier: DMA memory is filled
 * in place, other memory through the bounce buffer). Holes and unwritten
 * extents load as zeroes. Past the end of the file: -ERANGE. Returns 0, or
 * -EIO (NVMe error: status in *status when not NULL), -ETIMEDOUT, -ENODEV.
 */
int gpunvme_load_layer(struct gpunvme_layer_loader *l, uint64_t off, uint64_t len, void *dst, uint16_t *status);

/*
 * GPU tiers: queue the same work on `stream` (a cudaStream_t) and record
 * `event` (a cudaEvent_t, may be NULL) after it; returns at once. The
 * result of every queued load is collected by gpunvme_layer_loader_check()
 * once the event has completed (first failure wins, then cleared).
 */
int gpunvme_load_layer_async(struct gpunvme_layer_loader *l, uint64_t off, uint64_t len, void *dst, void *stream,
			     void *event);

/*
 * Several ranges at once: spans[i].len file bytes from spans[i].off into
 * spans[i].dst, as n loads of their own would, but planned and queued
 * together: their reads go to the controller in the same kernels (as many
 * as the bounce buffer needs), so a range does not wait for the last read
 * of the one before it. Each queued load fills and drains the queues: for
 * ranges of a few MiB that cost as much as the reads (a tensor's half of
 * the rows, one run each: 1.2-2.2 ms a range on the emulator, H200,
 * bench/EMU_NOTES.md). n == 0 is a load of zero bytes. The sync form
 * retries the whole set as gpunvme_load_layer retries a range. The reads
 * run in no set order, so destinations must not overlap (which bytes win
 * is then unspecified).
 */
struct gpunvme_load_span {
	uint64_t off;
	uint64_t len;
	void *dst;
};
int gpunvme_load_layers(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *spans, size_t n,
			uint16_t *status);
int gpunvme_load_layers_async(struct gpunvme_layer_loader *l, const struct gpunvme_load_span *spans, size_t n,
			      void *stream, void *event);
int gpunvme_layer_loader_check(struct gpunvme_layer_loader *l, uint16_t *status);
/*
 * GPU tiers: wait (bounded by the timeout) for every load queued on the
 * loader's own stream (stream NULL) and collect the result, as a load of
 * zero bytes does. A failure is returned, never retried: which of the
 * queued loads failed is not known here, and retrying "nothing" would
 * report success for bytes that never landed. After a timeout the queues
 * are recovered first, so the caller can load its ranges again with
 * gpunvme_load_layer (which retries). 0 at once on the CPU tier.
 */
int gpunvme_layer_loader_wait(struct gpunvme_layer_loader *l, uint16_t *status);
/*
 * GPU tiers: queue on `stream`, after loads into dst: if any load of this
 * loader has failed since the last check, dst[0, len) is overwritten with
 * 0xff bytes (NaN in every floating type) before later work on the stream
 * can use it, and the failure mark is raised. For consumers that only
 * order their work after the loads and check later: a failed load never
 * leaves bytes that pass for data. -ENOTSUP on the CPU tier (its loads
 * report at once).
 */
int gpunvme_load_guard_async(struct gpunvme_layer_loader *l, void *dst, uint64_t len, void *stream);
/* 1 when a guard has seen a failure not yet taken by
 * gpunvme_layer_loader_check (host memory: no CUDA call, no wait). */
int gpunvme_layer_loader_failed(const struct gpunvme_layer_loader *l);

/* Bytes moved by DMA straight into destinations, and through the bounce
 * buffer (first/last blocks, misaligned destinations), since init. */
struct gpunvme_loader_stats {
	uint64_t direct_bytes;
	uint64_t bounced_bytes;
	uint64_t zero_bytes;     /* holes and unwritten extents */
	uint64_t commands;       /* reads planned (the CPU path cuts them further at 1 MiB, the GPU path per warp) */
	uint64_t retries;        /* loads tried again after a failure */
	uint64_t resets;         /* controller resets among the recoveries before them */
};
void gpunvme_layer_loader_stats(const struct gpunvme_layer_loader *l, struct gpunvme_loader_stats *st);
/* One md member's statistics (member 0 of a single-namespace loader is the
 * loader itself); -ERANGE for no such member. */
int gpunvme_layer_loader_member_stats(const struct gpunvme_layer_loader *l, uint32_t member,
				      struct gpunvme_loader_stats *st);

/* ---- a model's tensors --------------------------------------------------------- */

/* Gap between two selected tensors up to which one run reads across it:
 * one command over a few MiB beats two commands and a second edge block. */
#define GPUNVME_MODEL_RUN_GAP (4u << 20)

struct gpunvme_model_run {
	uint64_t off, len;         /* file bytes */
	uint8_t *dst;              /* loader memory (device address on Tier 2) */
	uint32_t head, tail;       /* slack the placement left before dst and
	                              after dst + len: the file bytes that
	                              complete the run's first and last 4 KiB
	                              blocks fit there (gpunvme_model_run_span) */
};

struct gpunvme_model_buffers {
	size_t n_tensors;                       /* selected, in header order */
	const struct gpunvme_tensor **tensors;  /* into the model: keep it alive */
	void **ptr;                /* each tensor's bytes once loaded (loader
	                              memory; device address on Tier 2; a valid
	                              pointer of its run also for zero-size ones,
	                              NULL when nothing at all was read) */
	size_t n_runs;
	struct gpunvme_model_run *runs;         /* in file order */
	uint64_t bytes;            /* tensor bytes selected */
	uint64_t run_bytes;        /* bytes the runs read, gaps included */
	void *mem;                 /* the one loader allocation holding every
	                              run (NULL with no runs) */
};

/*
 * *out = the load span for bytes [from, from + len) of run k of b, from
 * counted from the run's start (-EINVAL when they are not in it). With GPUNVME_LOAD_EDGES=direct, a piece that
 * holds the run's first (last) byte is widened by the run's head (tail)
 * slack to whole 4 KiB blocks of the file: its partial edge blocks land by
 * DMA like the blocks between, where they would go through the loader's
 * bounce buffer (a one-block read and a copy each: placement "split" has
 * two per tensor and GPU). The slack then holds the file's neighbouring
 * bytes, never a tensor's. The default (GPUNVME_LOAD_EDGES unset or
 * "bounce") leaves the span as asked until the GPU runs measure it
 * (bench/EMU_NOTES.md, session 23).
 */
int gpunvme_model_run_span(const struct gpunvme_model_buffers *b, size_t k, uint64_t from, uint64_t len,
			   struct gpunvme_load_span *out);

/*
 * The length of the next piece of run k of b from byte `from` (counted from
 * the run's start) when a load takes at most `max` bytes at a time: the rest
 * of the run when it fits, else up to the last 4 KiB block of the file that
 * ends within `max` (where two pieces meet inside a block, both read their
 * part of it through the bounce buffer), else `max` (a piece shorter than
 * the way to the next block boundary). 0 for nothing left, max 0, or a run
 * not in b.
 */
uint64_t gpunvme_model_run_piece(const struct gpunvme_model_buffers *b, size_t k, uint64_t from, uint64_t max);

/*
 * Select the tensors of model m (all, or those matching `patterns`, see
 * gpunvme_tensor_match) and place them: runs of nearby file bytes, all in
 * one loader allocation, each run at a page boundary of it plus an in-page
 * offset that puts its first tensor on a 256-byte boundary as torch places
 * tensors (cuBLAS picks kernels by the operands' alignment); the blocks in
 * between land there directly (dword aligned, §4.3), only a run's first and
 * last blocks go through the bounce buffer. A run whose file offset is not
 * dword aligned is placed congruent to it modulo 4096 instead. Nothing is
 * read yet. -ENOENT when patterns match no tensor.
 */
int gpunvme_model_buffers_alloc(struct gpunvme_layer_loader *l, const struct gpunvme_model *m, const char *patterns,
				struct gpunvme_model_buffers **out);
/*
 * The same for an exact selection: the tensors m->tensors[idx[0..n)], in
 * that order (b->tensors[k] and b->ptr[k] belong to idx[k]), for callers
 * that pick tensors by name or position rather than by pattern — a name
 * holding '*', ',' or '[' cannot be matched exactly by a pattern. n = 0
 * selects nothing (no runs, no memory; loading it is a no-op). An index
 * past the model's tensors is -ERANGE, one given twice -EINVAL.
 *
 * Ownership (both allocators): the buffers and the loader memory of their
 * runs belong to the loader l and are freed by gpunvme_model_buffers_free
 * (or, all at once, by gpunvme_layer_loader_destroy: after that only free
 * the struct with gpunvme_model_buffers_free(NULL, b)). b->tensors point
 * into m: m must outlive b. idx is not kept.
 */
int gpunvme_model_buffers_alloc_sel(struct gpunvme_layer_loader *l, const struct gpunvme_model *m, const size_t *idx,
				    size_t n, struct gpunvme_model_buffers **out);
/*
 * The same with the widest gap a run reads across given (bytes; the
 * others use GPUNVME_MODEL_RUN_GAP; 0: only tensors that touch or overlap
 * share a run): for selections whose gaps hold someone else's bytes, such
 * as one GPU's rows of tensors split between GPUs, where reading a gap
 * would also hold it in that GPU's memory.
 */
int gpunvme_model_buffers_alloc_sel_gap(struct gpunvme_layer_loader *l, const struct gpunvme_model *m,
					const size_t *idx, size_t n, uint64_t max_gap,
					struct gpunvme_model_buffers **out);
/* Load every run: GPU tiers queue them on `stream` and record `event` (both
 * may be NULL: the loader's own stream, and then wait); the CPU tier loads
 * them at once. Results as for gpunvme_load_layer / _check. */
int gpunvme_model_load(struct gpunvme_layer_loader *l, struct gpunvme_model_buffers *b, void *stream, void *event,
		       uint16_t *status);
void gpunvme_model_buffers_free(struct gpunvme_layer_loader *l, struct gpunvme_model_buffers *b);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_LOADER_H */
