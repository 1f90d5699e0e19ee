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
