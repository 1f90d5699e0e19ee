/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The CUDA probes of `gpunvme doctor --probe` (doctor_gpu.cu), built only
 * with CUDA (GPUNVME_HAVE_CUDA). Each is harmless and bounded: a 2 MiB
 * allocation exported as a dma-buf and closed again; a registration of an
 * already mapped BAR0 page; one GPU load of CAP, waited for at most
 * timeout_ms. Every function returns 0 (worked), 1 (ran and failed) or
 * -1 (could not run); text says what happened in either case.
 */
#ifndef GPUNVME_CLI_DOCTOR_GPU_H
#define GPUNVME_CLI_DOCTOR_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The GPU at PCI address bdf exports 2 MiB of its memory as a dma-buf
 * (cuMemGetHandleForAddressRange, DMA_BUF_FD); also its memory size. */
int doctor_gpu_dmabuf(const char *bdf, uint64_t *memory_bytes, char *text, size_t len);

/* cudaHostRegister(bar0, len, IoMemory | Mapped) on the GPU at bdf; when
 * that works, one GPU read of CAP (offset 0) with a timeout: *read_rc 0
 * read (value in *cap), 1 failed (all ones or timed out), -1 not run. */
int doctor_gpu_register_io(const char *bdf, volatile void *bar0, size_t len, unsigned timeout_ms, int *read_rc,
			   uint64_t *cap, char *text, size_t tlen, char *rtext, size_t rlen);

#ifdef __cplusplus
}
#endif

#endif
