/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The emulator faults the tests inject most (include/gpunvme/emu.h), one
 * call each, for C and CUDA C++ tests.
 */
#ifndef GPUNVME_TEST_EMU_FAULTS_H
#define GPUNVME_TEST_EMU_FAULTS_H

#include <stdint.h>
#include <string.h>

#include "gpunvme/emu.h"

/* Reads of LBAs [slba, slba + nlb) of namespace nsid fail with
 * Unrecovered Read Error until the faults are cleared. */
static inline int emu_fault_media(struct gpunvme_emu *e, uint32_t nsid, uint64_t slba, uint64_t nlb)
{
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = GPUNVME_EMU_FAULT_MEDIA;
	f.nsid = nsid;
	f.slba = slba;
	f.nlb = nlb;
	return gpunvme_emu_inject(e, &f);
}

/* The next `count` commands on any I/O queue are dropped (never completed). */
static inline int emu_fault_drops(struct gpunvme_emu *e, uint32_t count)
{
	struct gpunvme_emu_fault f;
	memset(&f, 0, sizeof(f));
	f.kind = GPUNVME_EMU_FAULT_DROP;
	f.sqid = GPUNVME_EMU_SQID_ANY;
	f.count = count;
	return gpunvme_emu_inject(e, &f);
}

#endif
