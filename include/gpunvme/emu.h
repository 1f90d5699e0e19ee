/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The embedded NVMe controller emulator: an NVMe 1.4 PCIe controller model
 * that runs in-process. A driver talks to it exactly as to hardware: it
 * writes registers in the BAR0 memory returned by gpunvme_emu_bar0(), puts
 * queues and data in memory it has mapped into the emulator's DMA address
 * table (gpunvme_emu_dma_map), and polls completion queues. Nothing else.
 *
 * BAR0 is ordinary memory. The emulator notices register writes by polling
 * (CC, AQA/ASQ/ACQ on enable, doorbells), so the usual MMIO rules apply to
 * the host: write SQEs, then a release store (or __threadfence_system on a
 * GPU) and only then the doorbell. Read-only registers (CAP, VS, CSTS) are
 * owned by the emulator; host writes to them are overwritten.
 */
#ifndef GPUNVME_EMU_H
#define GPUNVME_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "gpunvme/spec/nvme.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPUNVME_EMU_MAX_NS 16
#define GPUNVME_EMU_MAX_PATH 1024

enum gpunvme_emu_backing {
	GPUNVME_EMU_BACK_RAM = 0,   /* anonymous memory, zero-filled */
	GPUNVME_EMU_BACK_FILE = 1,  /* mmap(MAP_SHARED) of a file, written with
	                               pwritev (no torn block if the process
	                               dies); Flush = msync */
	GPUNVME_EMU_BACK_NULL = 2,  /* no data: reads leave buffers untouched */
};

struct gpunvme_emu_ns_config {
	enum gpunvme_emu_backing backing;
	uint64_t size;       /* bytes; FILE: 0 means the file's size */
	uint32_t lba_shift;  /* 9 (512 B) or 12 (4 KiB) */
	char path[GPUNVME_EMU_MAX_PATH]; /* FILE only */
	uint8_t snapshot;    /* FILE: read the image into RAM at creation and
	                        serve it from there; writes stay in RAM and the
	                        file is opened read-only (benchmarks, demos) */
	uint8_t read_only;   /* FILE: open the image read-only and write-protect
	                        the namespace (writes fail with Namespace is
	                        Write Protected). Also chosen by itself when the
	                        image cannot be opened for writing (EACCES, EROFS,
	                        EPERM: a mode 0444 file, a read-only mount, an
	                        immutable file) */
};

/* Device model: turns the emulator into a given SSD. All zero = as fast as
 * the workers can go. Limits are per controller. */
struct gpunvme_emu_model {
	uint32_t latency_us;   /* added to every I/O command */
	uint64_t read_bps;     /* bytes per second, 0 = unlimited */
	uint64_t write_bps;
	uint64_t iops;         /* commands per second, 0 = unlimited */
};

/* BAR0 memory. The emulator asks for a zeroed, page-aligned block of `len`
 * bytes; a GPU host library can hand out pinned, GPU-mapped memory here. */
struct gpunvme_emu_bar_allocator {
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *p, size_t len);
	void *ctx;
};

struct gpunvme_emu_config {
	uint32_t nr_ns;
	struct gpunvme_emu_ns_config ns[GPUNVME_EMU_MAX_NS];
	uint32_t mqes;          /* CAP.MQES, 0's based (default 1023) */
	uint8_t mdts;           /* Identify MDTS, 2^n * 4 KiB; 0 = unlimited (default 5) */
	uint8_t dstrd;          /* CAP.DSTRD (default 0) */
	uint8_t cap_to;         /* CAP.TO in 500 ms units (default 20 = 10 s) */
	uint8_t vwc;            /* volatile write cache present (default 1) */
	uint16_t max_ioq;       /* I/O SQ/CQ pairs supported (default 64) */
	uint32_t workers;       /* I/O worker threads; 0 = no threads at all:
	                           the caller drives gpunvme_emu_poll() */
	uint32_t ready_delay_ms; /* CSTS.RDY follows CC.EN after this long */
	uint32_t idle_sleep_max_us; /* longest sleep of an idle worker (default 1000) */
	uint8_t gpu_pages;      /* 1: the emu: bus maps GPU memory page by page at
	                           scattered bus addresses, as the kmod: bus does
	                           (4 KiB tables, no contiguity); default 0 */
	struct gpunvme_emu_model model;
	struct gpunvme_emu_bar_allocator bar; /* NULL alloc: aligned_alloc */
	char serial[21];
	char model_name[41];
};

struct gpunvme_emu;

/* Fill *cfg with defaults: one 64 MiB RAM namespace of 512 B blocks, one
 * worker, MQES 1023, MDTS 5, 64 I/O queue pairs. */
void gpunvme_emu_config_init(struct gpunvme_emu_config *cfg);

/* Parse an emulator device string (what follows "emu:" in a URI) into *cfg,
 * on top of the defaults (but workers: half the online CPUs, 1 to 8, or
 * with the copies in the DMA process (gpunvme_emu_copies) 3/4, 1 to 12):
 *   ram:SIZE | null:SIZE | PATH   [ "?" key=value ("&" key=value)* ]
 * SIZE takes K/M/G/T suffixes (powers of 1024). Keys: lbads (9|12), nsq
 * (I/O queue pairs), mqes, mdts, dstrd, workers, latency_us, read_mbps,
 * write_mbps, iops, ready_ms, idle_us, vwc, snapshot (0|1: serve an image
 * file from a RAM copy), gpu_pages (0|1: GPU memory mapped per 4 KiB page at
 * scattered bus addresses), ns (extra namespaces: "ns=ram:1G,null:4G").
 * Returns 0 or -EINVAL; on error, *err (if not NULL) points at a static
 * message naming the problem. */
int gpunvme_emu_config_parse(struct gpunvme_emu_config *cfg, const char *spec,
			     const char **err);

/* Create a controller in the reset state (CC.EN = 0, CSTS.RDY = 0) and start
 * its threads. Returns 0 or -errno (-EINVAL for a bad config, -ENOENT etc.
 * for a file backing store that cannot be opened, -ENOMEM). */
int gpunvme_emu_create(const struct gpunvme_emu_config *cfg, struct gpunvme_emu **out);

/* Stop the threads and free everything. Outstanding commands are dropped,
 * as on a power loss; file-backed namespaces are msync'ed first. */
void gpunvme_emu_destroy(struct gpunvme_emu *emu);

/* BAR0: registers at offset 0, doorbells from 0x1000. */
volatile void *gpunvme_emu_bar0(struct gpunvme_emu *emu);
size_t gpunvme_emu_bar0_size(const struct gpunvme_emu *emu);

/* ---- DMA address table ------------------------------------------------- */

/* One piece of a copy_batch call: len bytes between GPU address dev_addr
 * and host memory (to_gpu: host -> GPU). dev_end is the end of the GPU
 * region (gpunvme_emu_dma_map_gpu) that dev_addr lies in: an engine that
 * merges pieces into one copy merges only pieces of one region, since two
 * regions may be two allocations, and one CUDA copy that spans two fails
 * (cudaErrorInvalidValue: two loader buffers adjacent in the address space,
 * session 21). */
struct gpunvme_emu_copy {
	uint64_t dev_addr;
	void *host;
	size_t len;
	int to_gpu;
	uint64_t dev_end;
};

/* Copies between the emulator's backing store (host memory) and GPU memory.
 * `lane` identifies the emulator thread issuing the copy, in
 * [0, gpunvme_emu_lanes()), so an implementation can keep one stream per
 * lane. copy() may return before the data moved; sync(lane) returns once
 * every copy issued on that lane has finished. The emulator posts a command's
 * completion only after sync() returned 0. Both return 0 or -errno; an error
 * completes the command with Data Transfer Error. */
struct gpunvme_emu_gpu_ops {
	int (*copy)(void *ctx, unsigned lane, uint64_t dev_addr, void *host,
		    size_t len, int to_gpu);
	int (*sync)(void *ctx, unsigned lane);
	void *ctx;
	/* Optional (NULL: copy() per piece): the copies of several commands
	 * in one call, in any order among themselves (NVMe orders no
	 * commands that are in flight together, NVMe Base 2.0 §3.4.1). A
	 * worker queues the pieces of a pass and issues them here before
	 * its sync(), so the per-call cost of the copy engine's API is paid
	 * once per pass rather than once per command. */
	int (*copy_batch)(void *ctx, unsigned lane, const struct gpunvme_emu_copy *v, unsigned n);
	/* Optional (NULL: copy() from the mapping): a read into GPU memory
	 * whose bytes are file fd's at off, also mapped at host (an image
	 * file's namespace). An engine that stages through pinned memory of
	 * its own reads the file into it (pread) rather than copy from the
	 * mapping, whose pages a load touches once each, each a page fault.
	 * Not batched; the same contract as copy() otherwise. dev_end: as
	 * in struct gpunvme_emu_copy (the engine may merge consecutive calls'
	 * pieces of one region). */
	int (*copy_from_file)(void *ctx, unsigned lane, uint64_t dev_addr, uint64_t dev_end, const void *host, int fd,
			      uint64_t off, size_t len);
};

/* Make [iova, iova + len) reachable by the controller, backed by host memory
 * at vaddr. Regions may not overlap (-EEXIST). len and iova need no
 * particular alignment. */
int gpunvme_emu_dma_map(struct gpunvme_emu *emu, uint64_t iova, void *vaddr, size_t len);

/* Same for GPU memory: controller accesses to [iova, iova + len) become
 * ops->copy() calls on dev_addr + (address - iova). */
int gpunvme_emu_dma_map_gpu(struct gpunvme_emu *emu, uint64_t iova, uint64_t dev_addr,
			    size_t len, const struct gpunvme_emu_gpu_ops *ops);

/* Remove the region that starts at iova (-ENOENT if none). Waits for any
 * command that is using the region, so the memory may be freed afterwards. */
int gpunvme_emu_dma_unmap(struct gpunvme_emu *emu, uint64_t iova);

/* The host memory behind namespace nsid (RAM, or the file mapping), so a
 * GPU library can pin it (cudaHostRegister) and copy engine transfers run
 * at full speed. From then on Deallocate zeroes pages in place instead of
 * returning them to the kernel (which would break the pin). -ENODATA for a
 * null namespace, -EINVAL for a bad nsid. */
int gpunvme_emu_ns_memory(struct gpunvme_emu *emu, uint32_t nsid, void **p, size_t *len);

/* How namespace nsid is served: GPUNVME_EMU_BACK_RAM (also an image read
 * into RAM with `snapshot`), _FILE (the file's mapping: page-cache pages,
 * which a GPU library should not pin whole) or _NULL; -EINVAL for a bad
 * nsid. */
int gpunvme_emu_ns_backing(struct gpunvme_emu *emu, uint32_t nsid);

/* Where the emulator's copies to GPU memory (Tier 2) run, for queue sets
 * created from now on in this process (src/emu_cuda, docs/emulator.md):
 * - GPUNVME_EMU_COPIES_INPROC (the default): in the application's CUDA
 *   context. A thread of the application blocked in a copy into pageable
 *   memory while reads are in flight holds them up until the reads time out.
 * - GPUNVME_EMU_COPIES_PROCESS: in a child process of the library's own,
 *   which no blocking call of the application holds up; it costs a second
 *   CUDA context (~1.6 s per program on the H100 machine). The Python
 *   module chooses it at import.
 * The environment variable GPUNVME_EMU_DMA (process or inproc), when set,
 * wins over both. gpunvme_emu_copies() says which applies now (a value of
 * the variable that is neither: what was set, said once on stderr). */
enum gpunvme_emu_copies {
	GPUNVME_EMU_COPIES_INPROC = 0,
	GPUNVME_EMU_COPIES_PROCESS = 1,
};
void gpunvme_emu_set_copies(enum gpunvme_emu_copies where);
enum gpunvme_emu_copies gpunvme_emu_copies(void);

/* Number of copy lanes (worker threads + the admin thread). */
unsigned gpunvme_emu_lanes(const struct gpunvme_emu *emu);

/* ---- Threadless mode ----------------------------------------------------- */

/* With config.workers == 0: run one pass of the controller (register changes,
 * admin queue, every I/O queue, timed completions). Returns the number of
 * commands fetched or completed (>= 0), or -EINVAL in threaded mode. */
int gpunvme_emu_poll(struct gpunvme_emu *emu);

/* ---- Fault injection ------------------------------------------------------ */

enum gpunvme_emu_fault_kind {
	GPUNVME_EMU_FAULT_MEDIA = 1,  /* commands touching LBAs fail: reads with
	                                 Unrecovered Read Error, writes with Write
	                                 Fault (when .writes is set) */
	GPUNVME_EMU_FAULT_DROP = 2,   /* the next .count commands on .sqid (0xffff:
	                                 any I/O queue) are fetched and never
	                                 completed; an Abort can still end them */
	GPUNVME_EMU_FAULT_CFS = 3,    /* controller fatal: CSTS.CFS = 1, nothing is
	                                 processed until CC.EN goes 1 -> 0 */
	GPUNVME_EMU_FAULT_REMOVE = 4, /* surprise removal: every BAR0 byte reads
	                                 0xff, nothing is processed or DMAed again
	                                 (until a RETURN) */
	GPUNVME_EMU_FAULT_SLOW = 5,   /* every I/O command completes .latency_us
	                                 later than the device model says, until
	                                 gpunvme_emu_clear_faults() */
	GPUNVME_EMU_FAULT_RETURN = 6, /* a removed device comes back, as after a
	                                 hot-plug: registers at their reset values
	                                 (CC = 0, CSTS = 0), no queues; the host
	                                 brings it up again (gpunvme_reset) */
};

struct gpunvme_emu_fault {
	enum gpunvme_emu_fault_kind kind;
	uint32_t nsid;     /* MEDIA */
	uint64_t slba;     /* MEDIA */
	uint64_t nlb;      /* MEDIA: number of blocks (not 0's based) */
	int writes;        /* MEDIA: also fail writes */
	uint16_t sqid;     /* DROP */
	uint32_t count;    /* DROP */
	uint32_t latency_us; /* SLOW: added to every I/O command (1..10,000,000) */
};

#define GPUNVME_EMU_SQID_ANY 0xffffu

int gpunvme_emu_inject(struct gpunvme_emu *emu, const struct gpunvme_emu_fault *f);
/* Remove MEDIA, SLOW and pending DROP faults (not CFS, not REMOVE). */
void gpunvme_emu_clear_faults(struct gpunvme_emu *emu);

/* ---- Statistics ----------------------------------------------------------- */

struct gpunvme_emu_stats {
	uint64_t admin_cmds;
	uint64_t io_cmds;       /* every I/O command completed */
	uint64_t reads, writes, flushes, write_zeroes, dsm;
	uint64_t bytes_read, bytes_written;
	uint64_t errors;        /* completions with a non-zero status */
	uint64_t dropped;       /* commands swallowed by a DROP fault */
	uint64_t aers_posted;
};

void gpunvme_emu_get_stats(struct gpunvme_emu *emu, struct gpunvme_emu_stats *st);
/* Commands completed on I/O submission queue qid (0 for the admin queue). */
uint64_t gpunvme_emu_sq_commands(struct gpunvme_emu *emu, uint16_t qid);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_EMU_H */
