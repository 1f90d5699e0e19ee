/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The tier policy (tier.h) over every combination of capability bits, GPU
 * present or not, and every request: AUTO's choice, explicit tiers allowed
 * or refused with -EOPNOTSUPP and a message that says why and names the
 * tier to use; the caps decoder; and the policy on real controllers (the
 * emulator; an md array's intersection is tested with NVMe/TCP in
 * tests/nvmf/test_tcp.c). No GPU is needed: the policy only reads bits.
 */
#include <stdbool.h>
#include <string.h>

#include "../harness/check.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/tier.h"

/* The policy written out again, plainly, as the oracle. */
static int expect(uint32_t caps, bool gpu, enum gpunvme_tier req, enum gpunvme_tier *t)
{
	bool dm = caps & GPUNVME_CAP_DEVMEM_DMA, q = caps & GPUNVME_CAP_GPU_QUEUES;
	if (req == GPUNVME_TIER_CPU) {
		*t = GPUNVME_TIER_CPU;
		return 0;
	}
	if (req == GPUNVME_TIER_AUTO) {
		if (gpu && q && dm)
			*t = GPUNVME_TIER_2;
		else if (gpu && q)
			*t = GPUNVME_TIER_1;
		else
			*t = GPUNVME_TIER_CPU;
		return 0;
	}
	if ((req == GPUNVME_TIER_2 && !dm) || !q || !gpu)
		return -EOPNOTSUPP;
	*t = req;
	return 0;
}

TEST_CASE(every_combination)
{
	const enum gpunvme_tier reqs[] = { GPUNVME_TIER_AUTO, GPUNVME_TIER_CPU, GPUNVME_TIER_1, GPUNVME_TIER_2 };
	for (uint32_t caps = 0; caps <= GPUNVME_CAP_ALL; caps++)
		for (int gpu = 0; gpu < 2; gpu++)
			for (size_t r = 0; r < sizeof(reqs) / sizeof(reqs[0]); r++) {
				enum gpunvme_tier want = GPUNVME_TIER_AUTO, got = GPUNVME_TIER_AUTO;
				int erc = expect(caps, gpu, reqs[r], &want);
				int rc = gpunvme_tier_choose_caps(caps, gpu, "vol:x", reqs[r], &got);
				CHECK(rc == erc, "caps 0x%x gpu %d tier %s: rc %d, want %d", caps, gpu,
				      gpunvme_tier_str(reqs[r]), rc, erc);
				if (!rc && !erc)
					CHECK(got == want, "caps 0x%x gpu %d tier %s: tier %s, want %s", caps, gpu,
					      gpunvme_tier_str(reqs[r]), gpunvme_tier_str(got), gpunvme_tier_str(want));
				if (rc == -EOPNOTSUPP) {
					const char *m = gpunvme_last_error();
					/* why: the tier and what it needs; the fix: a tier to use */
					CHECK(strstr(m, "tier ") && strstr(m, "needs") && strstr(m, "use "),
					      "caps 0x%x: %s", caps, m);
				}
			}
	return 0;
}

TEST_CASE(refusal_messages)
{
	enum gpunvme_tier t;
	const uint32_t pcie = GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_DOORBELL_MMIO | GPUNVME_CAP_DEEP_QUEUES;
	/* vfio:-like: tier 2 refused, naming the volume, the reason and tier 1 */
	CHECK_EQ(gpunvme_tier_choose_caps(pcie, true, "vfio:0000:01:00.0", GPUNVME_TIER_2, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("tier 2 (GPU memory) needs a controller that can DMA into GPU memory");
	CHECK_LAST_ERROR("vfio:0000:01:00.0 cannot");
	CHECK_LAST_ERROR("use tier 1");
	CHECK_LAST_ERROR("--tier 1");
	/* the same without a GPU: the fix is the CPU tier */
	CHECK_EQ(gpunvme_tier_choose_caps(pcie, false, NULL, GPUNVME_TIER_2, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("this volume cannot: use the CPU tier (--tier cpu");
	/* tier 1 without GPU queues */
	CHECK_EQ(gpunvme_tier_choose_caps(0, true, "x:y", GPUNVME_TIER_1, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("tier 1 needs a controller whose queues GPU threads can drive, and x:y cannot: use the CPU tier");
	/* a GPU tier without a GPU */
	CHECK_EQ(gpunvme_tier_choose_caps(GPUNVME_CAP_ALL, false, NULL, GPUNVME_TIER_1, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("tier 1 needs a CUDA GPU");
	/* vfio: AUTO is tier 1, emu: AUTO is tier 2 (the behaviour kept) */
	CHECK_OK(gpunvme_tier_choose_caps(pcie, true, NULL, GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_1);
	CHECK_OK(gpunvme_tier_choose_caps(GPUNVME_CAP_DEVMEM_DMA | GPUNVME_CAP_GPU_QUEUES, true, NULL,
					  GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_2);
	/* not a tier */
	CHECK_EQ(gpunvme_tier_choose_caps(GPUNVME_CAP_ALL, true, NULL, (enum gpunvme_tier)3, &t), -EINVAL);
	CHECK_LAST_ERROR("unknown tier 3");
	CHECK_EQ(gpunvme_tier_choose_caps(0, true, NULL, GPUNVME_TIER_CPU, NULL), -EINVAL);
	CHECK_EQ(gpunvme_tier_choose(NULL, 1, true, GPUNVME_TIER_AUTO, &t), -EINVAL);
	CHECK_STR(gpunvme_tier_str(GPUNVME_TIER_AUTO), "auto");
	CHECK_STR(gpunvme_tier_str(GPUNVME_TIER_CPU), "cpu");
	return 0;
}

TEST_CASE(caps_str)
{
	char b[96];
	CHECK_STR(gpunvme_caps_str(0, b, sizeof(b)), "none");
	CHECK_STR(gpunvme_caps_str(GPUNVME_CAP_ALL, b, sizeof(b)),
		  "devmem-dma,gpu-queues,doorbell-mmio,csts-gpu,deep-queues");
	CHECK_STR(gpunvme_caps_str(GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_DEEP_QUEUES, b, sizeof(b)),
		  "gpu-queues,deep-queues");
	/* a short buffer stays terminated */
	char s[8];
	gpunvme_caps_str(GPUNVME_CAP_ALL, s, sizeof(s));
	CHECK(strlen(s) < sizeof(s));
	return 0;
}

TEST_CASE(emu_controller)
{
	struct gpunvme_ctrl *c = NULL;
	REQUIRE_OK(gpunvme_open("emu:ram:16M", NULL, &c));
	struct gpunvme_ctrl_info ci;
	REQUIRE_OK(gpunvme_ctrl_info(c, &ci));
	/* the emulator: GPU memory through its copy engine, host-memory
	 * registers the GPU may read */
	CHECK_EQ(ci.caps, GPUNVME_CAP_DEVMEM_DMA | GPUNVME_CAP_GPU_QUEUES | GPUNVME_CAP_CSTS_GPU |
				  GPUNVME_CAP_DEEP_QUEUES);
	enum gpunvme_tier t;
	struct gpunvme_ctrl *cs[2] = { c, c };
	CHECK_OK(gpunvme_tier_choose(cs, 2, true, GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_2);
	CHECK_OK(gpunvme_tier_choose(cs, 1, false, GPUNVME_TIER_AUTO, &t));
	CHECK_EQ(t, GPUNVME_TIER_CPU);
	CHECK_EQ(gpunvme_tier_choose(cs, 1, false, GPUNVME_TIER_2, &t), -EOPNOTSUPP);
	CHECK_LAST_ERROR("CUDA GPU");
	gpunvme_close(c);
	return 0;
}

int main(int argc, char **argv)
{
	return check_main(argc, argv);
}
