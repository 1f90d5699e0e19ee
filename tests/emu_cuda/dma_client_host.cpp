/* SPDX-License-Identifier: BSD-2-Clause */
/* The library's DMA-process client (src/emu_cuda/dma_client.cu) compiled
 * for the host alone, for test_dma_client.cpp: its CUDA runtime calls are
 * that test's stubs. */
#include "emu_cuda/dma_client.cu"
