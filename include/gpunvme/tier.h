/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The tier policy: which data path loads a volume's bytes, decided in one
 * place from the capability bits its controllers were given at open
 * (gpunvme_ctrl_info's caps, GPUNVME_CAP_*). The CLI, the layer loader,
 * the layer stream and Python all ask here, so a volume loads on the same
 * tier whichever way it is read, and a tier it cannot do is refused with
 * the reason and the fix rather than failing later or silently changing.
 *
 *   AUTO    Tier 2 when every controller can DMA into GPU memory, else
 *           Tier 1 when GPU threads can drive every controller's queues,
 *           else the CPU tier; the CPU tier when there is no GPU.
 *   1, 2    checked against the capabilities (then the GPU): -EOPNOTSUPP
 *           with the reason when the volume cannot.
 *   CPU     always possible.
 */
#ifndef GPUNVME_TIER_H
#define GPUNVME_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_ctrl;

enum gpunvme_tier {
	GPUNVME_TIER_AUTO = -1, /* the policy above picks */
	GPUNVME_TIER_CPU = 0,   /* host DMA memory, commands from CPU threads */
	GPUNVME_TIER_1 = 1,     /* pinned host memory, commands from GPU threads */
	GPUNVME_TIER_2 = 2,     /* GPU memory, commands from GPU threads */
};

/*
 * The policy over capability bits `caps` (for several controllers, the
 * bits they all have). gpu: a CUDA GPU and the CUDA backend are usable.
 * `what` names the volume in messages (NULL: "this volume"). *chosen gets
 * the tier. Returns 0, -EOPNOTSUPP when an explicit tier is not possible
 * (message: why, and the tier to use instead), -EINVAL for an unknown tier.
 */
int gpunvme_tier_choose_caps(uint32_t caps, bool gpu, const char *what, enum gpunvme_tier req,
			     enum gpunvme_tier *chosen);

/*
 * The policy for a volume on controllers ctrls[0..n) (one for a namespace,
 * an md array's members, repeats allowed): their capabilities intersected;
 * a refusal names the first controller that lacks what the tier needs.
 */
int gpunvme_tier_choose(struct gpunvme_ctrl *const *ctrls, size_t n, bool gpu, enum gpunvme_tier req,
			enum gpunvme_tier *chosen);

/* "cpu", "1", "2", "auto" */
const char *gpunvme_tier_str(enum gpunvme_tier t);

#ifdef __cplusplus
}
#endif

#endif
