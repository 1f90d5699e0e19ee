/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The bus's device-memory DMA engine, for the GPU data path (ctrl_gpu.h):
 * where the controller has device memory's bytes moved for it (bus.h,
 * struct gpunvme_devmem_engine_ops), these reach the bus's hooks; on every
 * other bus they do nothing. The GPU side never learns which bus it is.
 */
#include <errno.h>

#include "ctrl/ctrl.h"
#include "ctrl/ctrl_gpu.h"

static const struct gpunvme_devmem_engine_ops *engine_ops(struct gpunvme_ctrl *c)
{
	return c->bus.ops->devmem_engine;
}

int gpunvme_ctrl_devmem_attach(struct gpunvme_ctrl *c, void **engine)
{
	const struct gpunvme_devmem_engine_ops *e = engine_ops(c);
	*engine = NULL;
	if (!e || !e->attach)
		return 0;
	return e->attach(&c->bus, engine);
}

int gpunvme_ctrl_devmem_sync(struct gpunvme_ctrl *c, void *engine)
{
	const struct gpunvme_devmem_engine_ops *e = engine_ops(c);
	if (!engine || !e || !e->sync)
		return 0;
	return e->sync(engine);
}

void gpunvme_ctrl_devmem_detach(struct gpunvme_ctrl *c, void *engine)
{
	const struct gpunvme_devmem_engine_ops *e = engine_ops(c);
	if (engine && e && e->detach)
		e->detach(engine);
}

void gpunvme_ctrl_devmem_pin(struct gpunvme_ctrl *c, uint32_t nsid, void **pinned, void (**unpin)(void *p))
{
	const struct gpunvme_devmem_engine_ops *e = engine_ops(c);
	*pinned = NULL;
	*unpin = NULL;
	if (e && e->pin_backing)
		e->pin_backing(&c->bus, nsid, gpunvme_ctrl_kept_pin(c), pinned, unpin);
}
