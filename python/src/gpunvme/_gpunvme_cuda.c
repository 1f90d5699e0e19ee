/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The CUDA runtime, as the extension uses it: the one file that tests
 * GPUNVME_PY_CUDA (setup.py defines it when the library's CUDA backend is
 * built). Without it the GPU tiers are refused and there are no devices.
 */
#include "_gpunvme.h"

#include <errno.h>
#include <stdio.h>

#include "gpunvme/tier.h"

#include "gpunvme/moe_gpu.h"

#ifdef GPUNVME_PY_CUDA
#include <cuda_runtime_api.h>
#include "gpunvme/gpu.h"
#endif

bool gnpy_have_cuda(void)
{
#ifdef GPUNVME_PY_CUDA
	return true;
#else
	return false;
#endif
}

int gnpy_tier_built(int tier)
{
#ifndef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU) {
		gnpy_raise_err(ENOTSUP,
			       "this gpunvme extension was built without CUDA: rebuild it on a machine with nvcc with "
			       "GPUNVME_CUDA=ON pip install --no-build-isolation ./python (or use device=\"cpu\")");
		return -1;
	}
#else
	(void)tier;
#endif
	return 0;
}

#ifdef GPUNVME_PY_CUDA
static int set_device(int dev, char *err)
{
	cudaError_t e = cudaSetDevice(dev);
	if (e != cudaSuccess) {
		snprintf(err, LASTERR_LEN, "cuda:%d: cudaSetDevice: %s (check the device index and CUDA_VISIBLE_DEVICES)",
			 dev, cudaGetErrorString(e));
		cudaGetLastError();
		return -ENODEV;
	}
	return 0;
}
#endif

int gnpy_gpu_prepare(int tier, int device, const struct gpunvme_loader_gpu_ops **gpu, char *err)
{
#ifdef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU) {
		*gpu = gpunvme_loader_gpu_backend();
		return set_device(device, err);
	}
#else
	(void)tier;
	(void)device;
	(void)gpu;
	(void)err;
#endif
	return 0;
}

int gnpy_use_device(int tier, int device, char *err)
{
#ifdef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU)
		return set_device(device, err);
#else
	(void)tier;
	(void)device;
	(void)err;
#endif
	return 0;
}

/* GPUs the CUDA runtime sees (0 without the CUDA backend) */
PyObject *gnpy_cuda_device_count(PyObject *m, PyObject *unused)
{
	(void)m;
	(void)unused;
	int n = 0;
#ifdef GPUNVME_PY_CUDA
	Py_BEGIN_ALLOW_THREADS
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		n = 0;
	}
	Py_END_ALLOW_THREADS
#endif
	return PyLong_FromLong(n);
}

/* ---- the GPU expert cache (moe_gpu.h), for Experts objects ------------------------- */

#ifndef GPUNVME_PY_CUDA
#define NO_CUDA_EXPERTS "the GPU expert cache needs the extension built with CUDA (GPUNVME_CUDA=ON)"
#endif

int gnpy_gpu_experts_open(struct gpunvme_volume *v, const struct gpunvme_moe_index *x, const struct gpunvme_extent *ext,
			  size_t n, uint64_t size, uint32_t slots, int tier, int device, struct gpunvme_gpu_experts **g,
			  char *err)
{
#ifdef GPUNVME_PY_CUDA
	int rc = set_device(device, err);
	if (rc)
		return rc;
	struct gpunvme_gpu_experts_opts o;
	gpunvme_gpu_experts_opts_init(&o);
	o.slots = slots;
	o.tier = (enum gpunvme_tier)tier;
	if ((rc = gpunvme_gpu_experts_open(v, x, ext, n, size, &o, g)))
		snprintf(err, LASTERR_LEN, "%s", gpunvme_last_error());
	return rc;
#else
	(void)v, (void)x, (void)ext, (void)n, (void)size, (void)slots, (void)tier, (void)device, (void)g;
	snprintf(err, LASTERR_LEN, NO_CUDA_EXPERTS);
	return -ENOTSUP;
#endif
}

int gnpy_gpu_experts_fetch(struct gpunvme_gpu_experts *g, int device, uint32_t i, uintptr_t ids, uint32_t k,
			   uintptr_t slots, uintptr_t stream, char *err)
{
#ifdef GPUNVME_PY_CUDA
	int rc = set_device(device, err);
	if (!rc && (rc = gpunvme_gpu_experts_fetch(g, i, (const uint32_t *)ids, k, (uint32_t *)slots, (void *)stream)))
		snprintf(err, LASTERR_LEN, "%s", gpunvme_last_error());
	return rc;
#else
	(void)g, (void)device, (void)i, (void)ids, (void)k, (void)slots, (void)stream;
	snprintf(err, LASTERR_LEN, NO_CUDA_EXPERTS);
	return -ENOTSUP;
#endif
}

int gnpy_gpu_experts_sync(struct gpunvme_gpu_experts *g, int device, uintptr_t stream,
			  struct gpunvme_gpu_experts_stats *st, char *err)
{
#ifdef GPUNVME_PY_CUDA
	int rc = set_device(device, err);
	if (!rc && (rc = gpunvme_gpu_experts_sync(g, (void *)stream, st)))
		snprintf(err, LASTERR_LEN, "%s", gpunvme_last_error());
	return rc;
#else
	(void)g, (void)device, (void)stream, (void)st;
	snprintf(err, LASTERR_LEN, NO_CUDA_EXPERTS);
	return -ENOTSUP;
#endif
}

void gnpy_gpu_experts_close(struct gpunvme_gpu_experts *g, int device)
{
#ifdef GPUNVME_PY_CUDA
	char err[LASTERR_LEN];
	if (g && !set_device(device, err))
		gpunvme_gpu_experts_close(g);
#else
	(void)g, (void)device;
#endif
}

void gnpy_gpu_experts_layout(const struct gpunvme_gpu_experts *g, uint8_t **base, const uint64_t **off,
			     uint64_t *slot_bytes, int *tier)
{
#ifdef GPUNVME_PY_CUDA
	gpunvme_gpu_experts_layout(g, base, off);
	*slot_bytes = gpunvme_gpu_experts_slot_bytes(g);
	*tier = (int)gpunvme_gpu_experts_tier(g);
#else
	(void)g;
	*base = NULL;
	*off = NULL;
	*slot_bytes = 0;
	*tier = 0;
#endif
}
