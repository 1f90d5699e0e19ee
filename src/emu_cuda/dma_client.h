/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The application's side of the emulator's DMA process (dma_proto.h says
 * why it exists). One process per GPU, started at the first use and kept
 * for the application's life; the copy engine (copy_engine.cu) opens lanes
 * in it and maps GPU allocations into it.
 */
#ifndef GPUNVME_EMU_CUDA_DMA_CLIENT_H
#define GPUNVME_EMU_CUDA_DMA_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct edma;

/* The DMA process for the calling thread's current GPU, started if need
 * be. NULL when it cannot be had: why says so (the caller then copies in
 * its own context, and says so once). */
struct edma *edma_get(char *why, size_t wlen);

/* Start a DMA process for the GPU at PCI address bus_id, wait for its
 * greeting, and end it: 0, or negative errno with why (the program's own
 * reason where it started). For tests: the embedded program, its start
 * from a memfd and its set-up are checked without copying anything. */
int edma_spawn_check(const char *bus_id, char *why, size_t wlen);

/* n lanes of the process: the first in *first. 0 or negative errno (why). */
int edma_open(struct edma *d, unsigned n, unsigned *first, char *why, size_t wlen);
void edma_close(struct edma *d, unsigned first, unsigned n);
/* GPUNVME_EMU_PROFILE=1 (read by the copy engine): each lane's time in pread
 * and waiting for staging, on stderr at edma_close */
void edma_profile(struct edma *d, bool on);

/* Make the GPU allocation holding [addr, addr + len) reachable by the
 * process (counted: each map needs its unmap). 0, or negative errno with
 * why (memory CUDA cannot share by IPC handle, e.g. cuMemCreate's or a
 * memory pool's): its copies then stay in the application's context.
 * Returns once the request is sent: the process's answer is waited for by
 * the first edma_mapped of the allocation (or the next set-up request). */
int edma_map(struct edma *d, uint64_t addr, size_t len, char *why, size_t wlen);
void edma_unmap(struct edma *d, uint64_t addr);
/* Whether [addr, addr + len) lies in an allocation the process holds,
 * after its answer if it is on its way. 0 with why set, once, when the
 * process refused a map (the caller says so: those copies stay here). */
int edma_mapped(struct edma *d, uint64_t addr, size_t len, char *why, size_t wlen);

/* Lane l's copies: host memory anywhere (copied through the lane's staging
 * memory), GPU memory in a mapped allocation. A read (to_gpu) is queued,
 * a write is complete on return. Bounded waits; 0 or negative errno. */
int edma_copy(struct edma *d, unsigned lane, uint64_t dev, void *host, size_t len, int to_gpu);
/* A read whose bytes are file fd's at off: pread into the lane's staging
 * (an image file's namespace: no first-touch faults on its mapping). */
int edma_copy_file(struct edma *d, unsigned lane, uint64_t dev, int fd, uint64_t off, size_t len);
/* Every copy lane l queued has landed: 0, -ETIMEDOUT, -EIO or -EFAULT,
 * the lane's failure since its last sync (taken: its emulator thread's
 * call, which fails the commands of its pass). */
int edma_sync(struct edma *d, unsigned lane);
/* The same wait, from another thread (a recovery), for the copies the
 * lane has handed over (a lane hands its reads over every merge bytes and
 * at its sync): the failure is left for the lane's own sync. 0, -ETIMEDOUT
 * or -EIO (the process exited). */
int edma_drain(struct edma *d, unsigned lane);

/* Bytes of staged reads a lane gathers before it hands them on as one copy
 * (stage_ring.h): GPUNVME_EMU_STAGE_MERGE where set (0: each piece on its
 * own, the same-run baseline), else dflt; at most cap. */
uint64_t emu_stage_merge_bytes(uint64_t cap, uint64_t dflt);

#endif
