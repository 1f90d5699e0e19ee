/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator behind a controller opened on an emu: URI. Not public API:
 * a user's program drives any controller the same way. Tests inject faults
 * and read counters through it, benchmarks read the namespace memory (the
 * GPU data path does not use it: the emulator's copy engine, src/emu_cuda,
 * reaches it through the bus). C linkage for the CUDA side.
 */
#ifndef GPUNVME_CTRL_EMU_H
#define GPUNVME_CTRL_EMU_H

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_ctrl;
struct gpunvme_emu;

/* NULL when the controller is not the emulator. */
struct gpunvme_emu *gpunvme_ctrl_emu(struct gpunvme_ctrl *c);

#ifdef __cplusplus
}
#endif

#endif
