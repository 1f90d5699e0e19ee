/* SPDX-License-Identifier: BSD-2-Clause */
/* Internal structures of the NVMe controller emulator (see docs/emulator.md). */
#ifndef GPUNVME_EMU_INTERNAL_H
#define GPUNVME_EMU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gpunvme/emu.h"
#include "gpunvme/spec/nvme.h"

/* Fixed controller properties. */
#define EMU_SQES 6              /* log2(64): the only SQ entry size (Identify SQES 0x66) */
#define EMU_CQES 4              /* log2(16) */
#define EMU_MPSMAX 4            /* CAP.MPSMAX: 64 KiB memory pages */
#define EMU_AERL 3              /* 0's based: 4 outstanding AERs */
#define EMU_ACL 3               /* 0's based abort command limit */
#define EMU_ERRLOG_ENTRIES 64   /* Identify ELPE + 1 */
#define EMU_EVENTS_MAX 16       /* queued asynchronous events */
#define EMU_MAX_IV 2048         /* MSI-X table size we claim (interrupts are not delivered) */
#define EMU_BURST_MAX 64        /* commands fetched from one SQ per round */
#define EMU_BATCH_MAX 128       /* GPU copies per copy_batch call: two bursts of
                                   one-piece commands; a longer batch saves
                                   nothing more than the call it already saved */

/* ---- per-thread context ---------------------------------------------------- */

struct emu_seg {           /* one translated piece of a data transfer */
	uint8_t *host;         /* host memory, or NULL for GPU memory */
	uint64_t dev;          /* GPU address when host == NULL */
	uint64_t dev_end;      /* the end of its GPU region (emu.h, struct gpunvme_emu_copy) */
	const struct gpunvme_emu_gpu_ops *gpu;
	uint64_t len;
};

struct emu_counters {      /* written by one thread only; read relaxed by others */
	uint64_t cmds, reads, writes, flushes, write_zeroes, dsm;
	uint64_t bytes_read, bytes_written, errors, dropped, media_errors;
};

/* GPUNVME_EMU_PROFILE=1: where a worker's time goes, printed when the
 * emulator is destroyed (bench/EMU_NOTES.md). Written by its own thread
 * only; read after it has been joined. */
#define EMU_PROF_GAP_NS 10000000ull /* 10 ms idle ends a burst */

struct emu_prof {
	uint64_t passes, busy_passes, busy_ns; /* passes; those that found commands, their time */
	uint64_t file_ns;                      /* in copy_from_file: pread into staging and its waits */
	uint64_t sync_ns;                      /* waiting for the lane's copies at a pass's end */
	uint64_t t0;                           /* the thread's start */
	/* the last burst: busy passes none more than EMU_PROF_GAP_NS after the
	 * one before (one load, without the metadata reads long before it) */
	uint64_t burst_ns, burst_busy_ns, last_ns;
	/* the device model (latency_us, read_mbps, iops): how long its
	 * timeline stood idle (gaps under EMU_PROF_GAP_NS: the commands came
	 * slower than it could serve them), and how long after their modeled
	 * time completions went out (a pass's copy wait, the CQ full) */
	uint64_t model_gap_ns, late_ns, late_max_ns, late_n;
	/* commands fetched and not yet completed, at most and integrated over
	 * the last burst (ns x commands, up to out_t) */
	uint64_t out, out_max, out_area, out_t;
};

struct emu_thread {
	struct gpunvme_emu *emu;
	unsigned lane;
	struct emu_seg *segs;  /* scratch for PRP translation */
	uint32_t segs_cap;
	bool gpu_pending;      /* copies issued on this lane since the last sync */
	/* GPU copies queued for one copy_batch call (emu_segs_copy), all for
	 * the ops in batch_ops; issued before the next sync or when full */
	struct gpunvme_emu_copy *batch;
	uint32_t nbatch;
	struct gpunvme_emu_gpu_ops batch_ops;
	bool batch_failed;     /* a batch since the last sync was refused */
	/* completions of this pass held for the lane's copies (pend[].gpu),
	 * and the first sync failure since they were released: a sync inside
	 * the pass (DSM, FUA write) clears gpu_pending but covers their
	 * copies, so the pass end releases them on these, not on gpu_pending */
	bool gpu_held;
	uint16_t gpu_err;
	struct emu_counters c;
	struct emu_prof prof;
};

/* ---- queues ---------------------------------------------------------------- */

struct emu_sq;

struct emu_cpl {           /* a completion waiting to be posted */
	uint64_t due_ns;       /* 0 = post as soon as the CQ has room */
	struct emu_sq *sq;
	uint32_t dw0;
	uint16_t cid;
	uint16_t status;       /* status value without the phase bit */
	bool gpu;              /* waits for a GPU copy sync */
};

struct emu_cq {
	uint16_t id;
	uint32_t size;
	uint64_t iova;
	struct gpunvme_cqe *ring;
	uint32_t tail;
	uint32_t head;         /* last valid value of the head doorbell */
	uint32_t bad_db;       /* last invalid doorbell value reported */
	uint8_t phase;
	uint32_t *db;          /* head doorbell in BAR0 */
	struct emu_sq *sqs;    /* attached SQs, linked by next */
	uint32_t nsqs;
	unsigned worker;
	struct emu_cpl *pend;  /* FIFO of completions, capacity pend_cap */
	uint32_t pend_cap, pend_head, pend_count;
	struct emu_region *region;
};

struct emu_sq {
	uint16_t id;
	uint32_t size;
	uint64_t iova;
	struct gpunvme_sqe *ring;
	uint32_t head;
	uint32_t tail;         /* last valid value of the tail doorbell */
	uint32_t bad_db;
	uint32_t *db;
	struct emu_cq *cq;
	struct emu_sq *next;
	uint32_t inflight;     /* fetched, not yet posted (QEMU: at most size) */
	uint16_t *hung;        /* CIDs swallowed by DROP faults */
	uint32_t nhung;
	uint64_t completed;    /* statistics, read relaxed */
	struct emu_region *region;
};

/* ---- DMA address table -------------------------------------------------- */

struct emu_region {
	uint64_t iova, len;
	uint8_t *va;                       /* host memory, or NULL */
	uint64_t dev;                      /* GPU memory */
	struct gpunvme_emu_gpu_ops gpu;
	uint32_t users;                    /* queues living in this region */
};

struct emu_dma {
	pthread_rwlock_t lock;
	struct emu_region **r;             /* sorted by iova */
	size_t n, cap;
};

/* ---- namespaces ------------------------------------------------------------ */

struct emu_ns {
	uint32_t nsid;
	enum gpunvme_emu_backing backing;
	uint32_t lba_shift;
	uint64_t nlbas;
	uint8_t *data;         /* RAM or file mapping; NULL for null */
	size_t map_len;
	int fd;
	/* Reads come from here with pread (emu_segs_from_file): fd for an
	 * image file, -1 for RAM and null, or when GPUNVME_EMU_FILE_READ=map
	 * asks for copies from the mapping (a baseline for measurements) */
	int read_fd;
	/* an image opened read-only (cfg read_only, or not writable): mapped
	 * PROT_READ; commands that modify it fail (emu_io.c, io_write_protected) */
	bool read_only;
	/* handed out by gpunvme_emu_ns_memory(): someone (a GPU library) may
	 * have pinned the pages, so Deallocate must not give them back */
	bool exported;             /* __atomic access */
};

/* ---- the controller ------------------------------------------------------- */

struct emu_worker {
	struct gpunvme_emu *emu;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;  /* held for a whole pass; queue changes take it */
	struct emu_cq **cqs;
	uint32_t ncqs, cqs_cap;
	struct emu_thread t;
	uint64_t next_due;     /* earliest modeled completion still pending (0: none) */
};

struct emu_event { uint8_t type, info, log; };

struct emu_features {
	uint32_t arb, pm, temp_thresh, err_rec, vwc, irq_coalesce, irq_config;
	uint32_t write_atomic, async_cfg;
	uint32_t nsq, ncq;     /* I/O queues granted, 1-based */
};

struct emu_media_fault { uint32_t nsid; uint64_t slba, nlb; bool writes; };
struct emu_drop_fault { uint16_t sqid; uint32_t count; };

struct gpunvme_emu {
	struct gpunvme_emu_config cfg;
	uint8_t *bar;
	size_t bar_size;
	uint64_t cap;
	uint32_t dstrd;
	uint64_t max_xfer;     /* MDTS in bytes, or the largest NLB when MDTS = 0 */

	struct emu_ns ns[GPUNVME_EMU_MAX_NS];
	uint32_t nn;

	struct emu_dma dma;

	struct emu_worker *workers;
	uint32_t nworkers;     /* >= 1, threads only when cfg.workers > 0 */
	bool threaded;
	bool prof;             /* GPUNVME_EMU_PROFILE=1 (struct emu_prof) */
	bool say_xfer;         /* GPUNVME_EMU_ERRORS=1: each data transfer error's cause on stderr */

	/* admin thread state (only the admin thread touches these) */
	pthread_t admin_thread;
	bool admin_started;
	struct emu_thread at;
	uint32_t last_cc;
	uint32_t csts;         /* the value the admin thread publishes */
	bool enabled;          /* admin queue live, CSTS.RDY will be / is 1 */
	uint64_t rdy_at_ns;    /* when CSTS.RDY follows CC.EN */
	uint32_t page_shift;   /* 12 + CC.MPS */
	struct emu_sq **sq;    /* [0 .. max_ioq] */
	struct emu_cq **cq;
	uint32_t db_qids;      /* queue ids whose doorbells fit in BAR0 */
	uint32_t scan_qid;     /* rotating scan of unused doorbells */
	struct emu_features feat;
	uint16_t aer_cids[EMU_AERL + 1];
	uint32_t naers;
	uint32_t aer_masked;   /* bit per event type reported and not yet cleared */

	/* events raised by workers (lock protected) */
	pthread_mutex_t ev_lock;
	struct emu_event ev[EMU_EVENTS_MAX];
	uint32_t nev;

	/* error log (lock protected) */
	pthread_mutex_t err_lock;
	struct gpunvme_error_log errlog[EMU_ERRLOG_ENTRIES];
	uint64_t err_count;

	/* faults */
	pthread_mutex_t fault_lock;
	uint32_t faults_active;            /* relaxed-read fast path */
	struct emu_media_fault *media;
	uint32_t nmedia;
	struct emu_drop_fault drops[16];
	uint32_t ndrops;
	uint32_t halted;                   /* CFS or removal: nothing is processed */
	uint32_t removed;
	uint32_t cfs_pending;              /* CFS injected; admin thread applies it */
	uint32_t return_pending;           /* RETURN injected; admin thread applies it */
	uint64_t slow_ns;                  /* SLOW fault: added to every I/O command */

	/* device model */
	uint64_t model_next_bw;            /* ns timestamps, reserved with CAS */
	uint64_t model_next_iops;
	bool model_on;

	uint64_t start_ns;
	uint64_t aers_posted;
	uint64_t admin_cmds;
	uint32_t stop;
};

/* ---- helpers shared by the emulator files ---------------------------------- */

uint64_t emu_now_ns(void);

/* BAR0 access: the host writes these words from other threads (or a GPU), so
 * every access is atomic; acquire on loads pairs with the host's release
 * store of a doorbell, making the SQ entries it wrote before visible. */
static inline uint32_t emu_reg_ld(const struct gpunvme_emu *e, uint32_t off)
{
	return __atomic_load_n((const uint32_t *)(const void *)(e->bar + off), __ATOMIC_ACQUIRE);
}
static inline void emu_reg_st(struct gpunvme_emu *e, uint32_t off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(void *)(e->bar + off), v, __ATOMIC_RELEASE);
}
static inline uint64_t emu_reg_ld64(const struct gpunvme_emu *e, uint32_t off)
{
	return (uint64_t)emu_reg_ld(e, off) | ((uint64_t)emu_reg_ld(e, off + 4) << 32);
}

/* statistics written by their own thread only */
#define EMU_STAT_ADD(field, v) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)

/* emu_dma.c */
int emu_dma_init(struct emu_dma *d);
void emu_dma_fini(struct emu_dma *d);
struct emu_region *emu_dma_find(struct emu_dma *d, uint64_t iova, uint64_t len);
uint16_t emu_prp_map(struct emu_thread *t, uint64_t prp1, uint64_t prp2, uint64_t len,
		     uint32_t *nsegs);
/* Move data between host memory `buf` and the segments. to_host: controller
 * writes host/GPU memory (a Read). Returns a status value. */
uint16_t emu_segs_copy(struct emu_thread *t, uint32_t nsegs, uint8_t *buf, int to_host);
/* Write host segments into a file at off (pwritev: each block old or new
 * even if the process dies meanwhile). 0 or -errno (-EFAULT: a GPU segment). */
int emu_segs_to_file(struct emu_thread *t, uint32_t nsegs, int fd, uint64_t off);
/* A Read from a file namespace: fd's bytes at off (mapped at map) into the
 * segments, host ones by preadv, GPU ones by the ops' copy_from_file where
 * there is one. Returns a status value. */
uint16_t emu_segs_from_file(struct emu_thread *t, uint32_t nsegs, const uint8_t *map, int fd, uint64_t off);
uint16_t emu_gpu_sync(struct emu_thread *t);
/* Admin data helpers: translate + copy + sync in one call (admin thread). */
uint16_t emu_dma_to_host(struct emu_thread *t, const struct gpunvme_sqe *c, const void *src, uint64_t len);
uint16_t emu_dma_from_host(struct emu_thread *t, const struct gpunvme_sqe *c, void *dst, uint64_t len);
int emu_thread_init(struct emu_thread *t, struct gpunvme_emu *emu, unsigned lane);
void emu_thread_fini(struct emu_thread *t);

/* emu_ns.c */
int emu_ns_open(struct emu_ns *ns, uint32_t nsid, const struct gpunvme_emu_ns_config *cfg);
void emu_ns_close(struct emu_ns *ns);
int emu_ns_flush(struct emu_ns *ns, uint64_t off, uint64_t len);
void emu_ns_deallocate(struct emu_ns *ns, uint64_t off, uint64_t len);
static inline struct emu_ns *emu_ns_get(struct gpunvme_emu *e, uint32_t nsid)
{
	return (nsid >= 1 && nsid <= e->nn) ? &e->ns[nsid - 1] : NULL;
}

/* Queue by id, NULL for ids that do not exist (admin thread only). */
static inline struct emu_sq *emu_sq_get(const struct gpunvme_emu *e, uint32_t qid)
{
	return qid < e->db_qids ? e->sq[qid] : NULL;
}
static inline struct emu_cq *emu_cq_get(const struct gpunvme_emu *e, uint32_t qid)
{
	return qid < e->db_qids ? e->cq[qid] : NULL;
}

/* emu_regs.c: the admin thread's pass */
int emu_admin_pass(struct gpunvme_emu *e);
void emu_raise_event(struct gpunvme_emu *e, uint8_t type, uint8_t info, uint8_t log);
void emu_controller_reset(struct gpunvme_emu *e);
void emu_free_admin_queues(struct gpunvme_emu *e);

/* emu_admin.c */
/* Execute one admin command. Returns false when the command completes later
 * (Asynchronous Event Request); otherwise *dw0 and *status are set. */
bool emu_admin_exec(struct gpunvme_emu *e, const struct gpunvme_sqe *c, uint32_t *dw0, uint16_t *status);
void emu_features_default(struct gpunvme_emu *e);
void emu_delete_all_queues(struct gpunvme_emu *e);
void emu_log_error(struct gpunvme_emu *e, uint16_t sqid, const struct gpunvme_sqe *c, uint16_t status,
		   uint64_t lba);

/* emu_io.c */
int emu_worker_pass(struct emu_worker *w);
void emu_cq_enqueue(struct emu_cq *cq, struct emu_sq *sq, uint16_t cid, uint32_t dw0, uint16_t status,
		    uint64_t due_ns);
bool emu_cq_post(struct emu_cq *cq, struct emu_sq *sq, uint16_t cid, uint32_t dw0, uint16_t status);
bool emu_cq_full(const struct emu_cq *cq);
/* Post the CQ's pending completions that are due, in order, while it has
 * room; *next_due gets the earliest one still waiting for its time. */
int emu_cq_drain(struct emu_cq *cq, uint64_t *now, uint64_t *next_due, struct emu_prof *pf);
int emu_cq_grow(struct emu_cq *cq, uint32_t extra);
/* Read a doorbell: a value below `size` updates *val; anything else is
 * ignored and raises an Invalid Doorbell Write Value event (once per value). */
bool emu_db_read(struct gpunvme_emu *e, uint32_t *db, uint32_t size, uint32_t *val, uint32_t *bad);

/* Fetch the entry at the SQ head into *c (§4.1: the controller consumes
 * entries in order, head up to the last tail written) and count it in
 * flight until its completion is posted. False when the SQ is empty or
 * size commands are in flight (QEMU fetches no further either). */
static inline bool emu_sq_fetch(struct emu_sq *sq, struct gpunvme_sqe *c)
{
	if (sq->head == sq->tail || sq->inflight >= sq->size)
		return false;
	memcpy(c, &sq->ring[sq->head], sizeof(*c));
	if (++sq->head == sq->size)
		sq->head = 0;
	sq->inflight++;
	return true;
}

#endif
