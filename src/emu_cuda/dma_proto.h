/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator's DMA process: what it and the application share.
 *
 * Why a process: the emulator is a controller inside the application, and
 * it moves Tier 2 data with the GPU's copy engine. Copies queued from the
 * application's CUDA context wait whenever one of the application's
 * threads is blocked in a copy into pageable memory (torch's `.cpu()`), so
 * a read kernel that waits for the emulator and a host thread that waits
 * for the read kernel wait for each other until the reads time out. A
 * context of the emulator's own in the same process is held up the same way
 * by a pageable copy on the legacy stream; a process of its own is not
 * (bench/ctx_stall_probe.cu, bench/results/emu-dma-2026-11-27). So the
 * copies run in a child process (src/emu_cuda/server/), which reaches the
 * application's GPU buffers through CUDA IPC handles and its host data
 * through staging memory both processes map.
 *
 * Two channels:
 * - a SOCK_SEQPACKET socket (fd 3 in the child) for set-up: open and close
 *   lanes, map and unmap GPU allocations; one request, one reply;
 * - a memfd (fd 4 in the child) with the lanes' request rings and staging
 *   memory: the data path, no system call while both sides are busy.
 *
 * A lane is one emulator thread's copy queue (emu.h: one lane per thread).
 * Its ring is single-producer (the emulator thread), single-consumer (the
 * child's mover thread, which serves every lane); `posted` and `done` are
 * free-running counters.
 */
#ifndef GPUNVME_EMU_CUDA_DMA_PROTO_H
#define GPUNVME_EMU_CUDA_DMA_PROTO_H

#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EDMA_MAGIC 0x34616d64u      /* "dma4" */
/* Lanes in one child: a queue set takes one per worker and one for its
 * admin queue, so 19 sets of 12 workers (Python's default on 16 CPUs,
 * emu_config.c) fit. With 64, md RAID0 of 4 members (4 sets of 13) and one
 * more set open needed 65, and the last set's copies stayed in the
 * application (session 20). A lane costs its slot here (~1.7 KiB) and, once
 * used, its staging and events in the child; the shared memory is sparse,
 * so lanes never opened cost nothing, and the mover sweeps only up to the
 * highest lane open (dma_server.cu). */
#define EDMA_LANES 256
#define EDMA_RING 64                /* requests in flight per lane */
#define EDMA_CHUNK (512u << 10)     /* one staging chunk: the largest piece one request moves */
/* Staging per lane, a byte ring (dma_client.cu): 4 MiB unless
 * GPUNVME_EMU_DMA_STAGE_MB says otherwise (1 to 32). The application picks
 * it and writes it in the header (lane_stage); the child maps the memory
 * at its size. */
#define EDMA_LANE_STAGE_DEFAULT (4ull << 20)
#define EDMA_LANE_STAGE_MIN (1ull << 20)
#define EDMA_LANE_STAGE_MAX (32ull << 20)

enum edma_op { EDMA_H2D = 1, EDMA_D2H = 2 };

/* One copy: staging bytes [off, off + len) of the shared memory to or from
 * the application's GPU address dev. */
struct edma_req {
	uint64_t dev;
	uint64_t off;
	uint32_t len;
	uint32_t op;
};

/* Written by one side each, as marked; 64-byte lines apart so the two
 * sides' stores do not share a cache line. */
struct edma_lane {
	uint32_t posted;     /* app: requests posted (release: the request and its staging bytes) */
	uint8_t pad0[60];
	uint32_t done;       /* child: requests complete on the GPU (release: D2H bytes in staging) */
	uint32_t app_sleep;  /* app: 1 while it may sleep on done (futex) */
	int32_t err;         /* child: a failure since the app last took it (negative errno) */
	uint8_t pad1[52];
	struct edma_req ring[EDMA_RING];
};

struct edma_shm {
	uint32_t magic;
	uint32_t lanes;
	uint64_t stage_off; /* lane l's staging: stage_off + l * lane_stage */
	uint64_t lane_stage; /* bytes of staging per lane (EDMA_LANE_STAGE_MIN..MAX, whole chunks) */
	/* the child's one mover thread serves every lane: it sleeps on kick
	 * when none has work, srv_sleep set; the app bumps kick and wakes it
	 * after publishing requests while srv_sleep is set */
	uint32_t srv_sleep;  /* child */
	uint32_t kick;       /* app (futex) */
	uint8_t pad[32];
	struct edma_lane lane[EDMA_LANES];
};

/* the shared memory's size for a lane_stage: the header, then the lanes'
 * staging (pages appear when first touched: only lanes in use cost memory) */
static inline uint64_t edma_shm_size(uint64_t lane_stage)
{
	return ((sizeof(struct edma_shm) + 4095) & ~(uint64_t)4095) + EDMA_LANES * lane_stage;
}

/* a lane_stage both sides accept */
static inline int edma_lane_stage_ok(uint64_t b)
{
	return b >= EDMA_LANE_STAGE_MIN && b <= EDMA_LANE_STAGE_MAX && b % EDMA_CHUNK == 0;
}

/* Set-up messages on the socket. Replies: struct edma_reply. */
enum edma_msg { EDMA_OPEN = 1, EDMA_CLOSE = 2, EDMA_MAP = 3, EDMA_UNMAP = 4 };

struct edma_ctl {
	uint32_t msg;
	uint32_t n;           /* OPEN, CLOSE: lanes; CLOSE: base lane in first */
	uint32_t first;
	uint32_t pad;
	uint64_t base;        /* MAP, UNMAP: the allocation's base address in the application */
	uint64_t size;        /* MAP: its size */
	uint8_t handle[64];   /* MAP: cudaIpcMemHandle_t */
};

struct edma_reply {
	int32_t rc;           /* 0 or negative errno */
	uint32_t first;       /* OPEN: the first lane given */
	uint32_t open_us;     /* how long it took (GPUNVME_EMU_PROFILE=1 prints it): MAP the IPC open,
			       * OPEN the lanes' set-up, the first reply (hello) the child's CUDA start */
	char why[120];        /* rc != 0: the reason, for the message the app prints */
};

/* A futex on the shared memory (not FUTEX_PRIVATE: two processes): both
 * sides sleep on the other's counter only when idle. */
static inline long edma_futex(uint32_t *a, int op, uint32_t v, const struct timespec *t)
{
	return syscall(SYS_futex, a, op, v, t, NULL, 0);
}

#endif
