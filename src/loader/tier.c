/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The tier policy (include/gpunvme/tier.h). Decided from capability bits
 * only: the transports set them at open, so a new transport gets the right
 * tier by saying what it can do, and no caller compares transport names.
 */
#include <errno.h>
#include <stdio.h>

#include "base/base.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/tier.h"

const char *gpunvme_tier_str(enum gpunvme_tier t)
{
	switch (t) {
	case GPUNVME_TIER_AUTO: return "auto";
	case GPUNVME_TIER_CPU: return "cpu";
	case GPUNVME_TIER_1: return "1";
	case GPUNVME_TIER_2: return "2";
	}
	return "?";
}

/* The fix named in a refusal: the best tier this volume can do. */
static const char *instead(uint32_t caps, bool gpu)
{
	if (gpu && (caps & GPUNVME_CAP_GPU_QUEUES))
		return "use tier 1 (pinned host memory the GPU reads: --tier 1, tier=1)";
	return "use the CPU tier (--tier cpu, device=\"cpu\")";
}

/* What both GPU tiers need: GPU threads on the queues, and a GPU. */
static int gpu_tier(bool q, bool gpu, const char *what, enum gpunvme_tier req, enum gpunvme_tier *chosen)
{
	if (!q)
		return gpunvme_set_error(-EOPNOTSUPP,
					 "tier %s needs a controller whose queues GPU threads can drive, and %s cannot: %s",
					 gpunvme_tier_str(req), what, instead(0, false));
	if (!gpu)
		return gpunvme_set_error(-EOPNOTSUPP,
					 "tier %s needs a CUDA GPU and the CUDA backend, and none is usable here: %s",
					 gpunvme_tier_str(req), instead(0, false));
	*chosen = req;
	return 0;
}

int gpunvme_tier_choose_caps(uint32_t caps, bool gpu, const char *what, enum gpunvme_tier req,
			     enum gpunvme_tier *chosen)
{
	if (!chosen)
		return gpunvme_set_error(-EINVAL, "tier policy: bad arguments");
	if (!what)
		what = "this volume";
	const bool q = caps & GPUNVME_CAP_GPU_QUEUES;
	const bool dm = caps & GPUNVME_CAP_DEVMEM_DMA;
	switch (req) {
	case GPUNVME_TIER_AUTO:
		*chosen = !gpu ? GPUNVME_TIER_CPU : q && dm ? GPUNVME_TIER_2 : q ? GPUNVME_TIER_1 : GPUNVME_TIER_CPU;
		return 0;
	case GPUNVME_TIER_CPU:
		*chosen = GPUNVME_TIER_CPU;
		return 0;
	case GPUNVME_TIER_2:
		/* the volume first: its answer does not depend on the machine */
		if (!dm)
			return gpunvme_set_error(-EOPNOTSUPP,
						 "tier 2 (GPU memory) needs a controller that can DMA into GPU memory "
						 "(emu:, or kmod: through the gpunvme kernel module), and %s cannot: %s",
						 what, instead(caps, gpu));
		return gpu_tier(q, gpu, what, req, chosen);
	case GPUNVME_TIER_1:
		return gpu_tier(q, gpu, what, req, chosen);
	}
	return gpunvme_set_error(-EINVAL, "unknown tier %d (auto = -1, cpu = 0, 1, 2)", (int)req);
}

int gpunvme_tier_choose(struct gpunvme_ctrl *const *ctrls, size_t n, bool gpu, enum gpunvme_tier req,
			enum gpunvme_tier *chosen)
{
	if (!ctrls || !n || !chosen)
		return gpunvme_set_error(-EINVAL, "tier policy: bad arguments (no controller)");
	uint32_t caps = GPUNVME_CAP_ALL;
	for (size_t i = 0; i < n; i++) {
		struct gpunvme_ctrl_info ci;
		int rc;
		if (!ctrls[i])
			return gpunvme_set_error(-EINVAL, "tier policy: no controller for member %zu", i);
		if ((rc = gpunvme_ctrl_info(ctrls[i], &ci)))
			return rc;
		caps &= ci.caps;
	}
	int rc = gpunvme_tier_choose_caps(caps, gpu, NULL, req, chosen);
	if (rc != -EOPNOTSUPP)
		return rc;
	/* again, naming the controller the refusal is about: the first that
	 * alone is refused */
	for (size_t i = 0; i < n; i++) {
		struct gpunvme_ctrl_info ci;
		char what[96];
		enum gpunvme_tier t;
		gpunvme_ctrl_info(ctrls[i], &ci);
		snprintf(what, sizeof(what), "%s:%s", ci.transport, ci.addr);
		if (gpunvme_tier_choose_caps(ci.caps, gpu, what, req, &t) == -EOPNOTSUPP)
			return -EOPNOTSUPP;
	}
	/* each alone passes but not together (cannot happen with one bit per
	 * need): the first refusal's message is still the last error */
	return rc;
}
