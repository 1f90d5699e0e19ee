/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Layer stream: run a model bigger than GPU memory by keeping only a window
 * of its layers in memory. The tensors of a model (one file or a model set's
 * address space, modelset.h) are grouped into layers by a pattern holding
 * the layer index (`model.layers.{i}.`); the tensors outside every layer
 * (embeddings, final norm, head) are loaded once and stay resident.
 *
 * The window is K slots of loader memory, each sized to the largest layer.
 * Layers are used in cyclic order 0, 1, ..., L-1, 0, ... (one decoder pass
 * per token): while the consumer holds layer i, layers i+1 .. i+K-1 are
 * being read into the other slots. Releasing layer i queues the read of
 * layer i+K into its slot behind the consumer's CUDA event, so the slot is
 * overwritten only once the GPU work that used it has run: on the GPU tiers
 * nothing in acquire/release waits on the host in steady state (the
 * consumer's stream waits on the layer's "ready" event, the reads' stream
 * on the consumer's "done" event).
 *
 * GPUNVME_STREAM_TRACE=<file> (environment, read at open) appends the
 * stream's timeline to <file>, one line per interval, in ms since open:
 * "gpu read <layer> <start> <end>" (a layer's reads on the reads' stream),
 * "gpu wait <layer> <start> <end>" (the consumer's stream waiting for
 * them), "host acquire|release <layer> <enter> <return>" (the calls).
 *
 * Tiers: Tier 2 (GPU memory, GPU-initiated reads), Tier 1 (pinned host
 * memory, GPU-initiated reads), and the CPU tier (host DMA memory, no GPU):
 * the CPU tier reads a layer inside acquire (no read-ahead; stall = read
 * time). opts.loader.tier = GPUNVME_TIER_AUTO lets the tier policy pick
 * from the controllers' capabilities (tier.h); an explicit tier they cannot
 * do is refused with the reason. There is no fallback of the stream's own:
 * a tier that was chosen and then fails to set up (e.g. not enough GPU
 * memory) is an error.
 */
#ifndef GPUNVME_STREAM_H
#define GPUNVME_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layers at most (the largest published decoders have a few hundred). */
#define GPUNVME_STREAM_MAX_LAYERS 65536u
/* Two tensors of one layer closer than this in the file are read by one
 * command run (the bytes between land in the slot unused). */
#define GPUNVME_STREAM_RUN_GAP (1u << 20)

struct gpunvme_stream_opts {
	/* Tensor names of layer i: this text with {i} replaced by i (decimal,
	 * no leading zeros) is a prefix of the name. Literal text otherwise;
	 * exactly one {i}. Layers must be numbered 0..L-1 without a gap. */
	const char *layers;
	/* Tensors kept resident (gpunvme_tensor_match patterns); NULL: every
	 * tensor that is in no layer; "": none. A resident tensor that is also
	 * in a layer is -EINVAL. */
	const char *resident;
	uint32_t window;                    /* K slots, >= 1; more than the layers: the layers */
	struct gpunvme_loader_opts loader;  /* tier, queues, depth, timeout, GPU backend */
	int no_fallback;                    /* ignored (ABI): nothing falls back, tier.h decides */
	/* 1: acquire waits on the host (bounded) until the layer's reads are
	 * done, so the consumer's stream never holds a wait on a read in
	 * flight; reads still run ahead. For the emulator's Tier 2 when its
	 * copy lanes may share hardware queues with the consumer (docs/loader.md,
	 * Limits); default 0: nothing waits on the host. */
	int sync_reads;
};

void gpunvme_stream_opts_init(struct gpunvme_stream_opts *o);

/* One layer as the consumer sees it, valid from acquire to release. */
struct gpunvme_stream_layer {
	uint32_t index;
	size_t n_tensors;
	const struct gpunvme_tensor *const *tensors; /* into the model, in header order */
	void *const *ptr;     /* each tensor's bytes: device address on Tier 2, host
	                         address on Tier 1 (pinned) and the CPU tier */
	uint64_t bytes;       /* tensor bytes of the layer */
};

struct gpunvme_stream_stats {
	enum gpunvme_tier tier;   /* the tier in use (after any fallback) */
	int fell_back;            /* always 0 (ABI): the tier policy decides at open */
	uint32_t layers, window;
	uint64_t slot_bytes;      /* one slot (largest layer, placed) */
	uint64_t memory_bytes;    /* tier memory held: slots + resident tensors */
	uint64_t bounce_bytes;    /* the loader's bounce buffer (same tier) */
	uint64_t resident_bytes;  /* tensor bytes kept resident */
	uint64_t layer_loads;     /* layers read */
	uint64_t bytes_read;      /* bytes the layer reads moved (runs, gaps included) */
	uint64_t acquires;
	uint64_t restarts;        /* acquires of a layer outside the window (reads begin anew) */
	double io_ms;             /* time the layer reads took (GPU: on the reads' stream) */
	double stall_ms;          /* time consumers waited for a layer's bytes */
	double overlap;           /* share of read time hidden behind the consumer: 1 - stall / io, in [0, 1] */
	/* appended (ABI): the stream's loader's recoveries (loader.h,
	 * gpunvme_loader_stats). Not 0 in a run with no fault means reads
	 * timed out and were repeated: the bytes came out right, but slowly
	 * (a TCP queue stall hid this way, 30 s per stream) */
	uint64_t retries;         /* loads tried again after a failure */
	uint64_t resets;          /* controller resets among those recoveries */
};

struct gpunvme_layer_stream;

/*
 * Open a stream over the model m whose bytes are at extents ext[0..n) of
 * namespace nsid (file_size bytes; for a model set: set->model, set->ext,
 * set->n_ext, set->size). Reads the resident tensors (and waits), and
 * queues the reads of layers 0..K-1. m must outlive the stream.
 * Errors: -EINVAL (no pattern, no or two {i}, window 0, a gap in the layer
 * numbers, a tensor both resident and in a layer), -ENOENT (no tensor
 * matches the layer pattern), -E2BIG (more layers than the limit), the
 * loader's errors (-ENOTSUP for a GPU tier without the CUDA backend,
 * -ENOMEM when K slots do not fit).
 */
int gpunvme_layer_stream_open(struct gpunvme_ctrl *c, uint32_t nsid, const struct gpunvme_model *m,
			      const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
			      const struct gpunvme_stream_opts *opts, struct gpunvme_layer_stream **out);
/*
 * The same over a file on an md array (gpunvme_md_open): member k is
 * namespace nsids[k] of controller ctrls[k]; ext are the file's extents on
 * the array. The stream's loader reads every member's chunks from that
 * member (gpunvme_layer_loader_init_md): a stream opened on one member's
 * controller with the array's extents would read the wrong bytes.
 * ctrls and nsids are used during the call only.
 */
int gpunvme_layer_stream_open_md(struct gpunvme_ctrl *const *ctrls, const uint32_t *nsids,
				 const struct gpunvme_md *md, const struct gpunvme_model *m,
				 const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
				 const struct gpunvme_stream_opts *opts, struct gpunvme_layer_stream **out);
/* The stream over a file of a volume (volume.h): member by member on an md
 * array, like the loader (gpunvme_layer_loader_init_volume). */
struct gpunvme_volume;
int gpunvme_layer_stream_open_volume(struct gpunvme_volume *v, const struct gpunvme_model *m,
				     const struct gpunvme_extent *ext, size_t n, uint64_t file_size,
				     const struct gpunvme_stream_opts *opts, struct gpunvme_layer_stream **out);
void gpunvme_layer_stream_close(struct gpunvme_layer_stream *s);

uint32_t gpunvme_layer_stream_layers(const struct gpunvme_layer_stream *s);
/* The resident tensors (NULL when there are none): loaded at open. */
const struct gpunvme_model_buffers *gpunvme_layer_stream_resident(const struct gpunvme_layer_stream *s);

/*
 * Layer i for use on `stream` (a cudaStream_t; NULL = the default stream;
 * ignored by the CPU tier): GPU tiers make that stream wait for the layer's
 * reads and return at once; the CPU tier reads it now. A layer outside the
 * window restarts the window there (no layer may be held then: -EBUSY).
 * -ERANGE past the last layer, -EBUSY when i is already held.
 *
 * Read failures on the GPU tiers (-EIO with the NVMe status, -ETIMEDOUT,
 * -ENODEV): the consumer's work is ordered after the reads without a host
 * wait, so it can run before a failure is known. A layer whose reads, or
 * any earlier read, failed is therefore poisoned before the consumer's
 * stream can see it: every byte of the slot 0xff (NaN in every floating
 * type; gpunvme_load_guard_async). The failure is then reported by every
 * later acquire or release once the reads behind it have run (no wait),
 * by the acquire of layer 0 of each pass (a short host wait), by check(i)
 * (waits for layer i's reads), sync() and stats(); with opts.sync_reads,
 * by the acquire of the failed layer itself. A failure is final: every
 * later call returns it (close the stream; the queues may need a reset).
 */
int gpunvme_layer_stream_acquire(struct gpunvme_layer_stream *s, uint32_t i, void *stream,
				 const struct gpunvme_stream_layer **out);
/*
 * Done with layer i: `event` (a cudaEvent_t recorded after the last use)
 * or, when NULL, the stream's current end (`stream`, NULL = default
 * stream) releases the slot; the read of the next layer into it is queued
 * behind that event. -EINVAL when i is not held.
 */
int gpunvme_layer_stream_release(struct gpunvme_layer_stream *s, uint32_t i, void *stream, void *event);

/* Wait (bounded by the loader's timeout) for the reads of layer i's last
 * queued load and report any read failure so far: a consumer that wants a
 * result it can trust calls it for the last layer of a pass before using
 * the pass's output (layers read later, the next pass's window, are not
 * waited for). 0 at once on the CPU tier (acquire reported). */
int gpunvme_layer_stream_check(struct gpunvme_layer_stream *s, uint32_t i);
/* Wait (bounded by the loader's timeout) for every queued read and report
 * the first failure. */
int gpunvme_layer_stream_sync(struct gpunvme_layer_stream *s);
/* Statistics so far; GPU tiers wait (bounded) for the timing of queued reads. */
int gpunvme_layer_stream_stats(struct gpunvme_layer_stream *s, struct gpunvme_stream_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_STREAM_H */
