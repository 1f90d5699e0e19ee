/* SPDX-License-Identifier: BSD-2-Clause */
/* The emulator's DMA process (src/emu_cuda/server/dma_server.cu) compiled
 * for the host alone, against cuda_fake_rt.cpp: test_dma_e2e starts it as
 * the library starts the real one. */
#include "emu_cuda/server/dma_server.cu"
