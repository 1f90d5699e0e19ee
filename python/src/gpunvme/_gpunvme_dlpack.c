/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The DLPack export of Tensor (_gpunvme_loader.c) and View
 * (_gpunvme_stream.c): a legacy "dltensor" capsule of 1-D uint8 bytes that
 * holds a reference to the object owning the memory.
 */
#include "_gpunvme.h"

#include <errno.h>
#include <stdlib.h>

/* ---- DLPack (dmlc/dlpack dlpack.h, the legacy unversioned ABI) ---------------- */

typedef struct {
	int32_t device_type; /* DLDeviceType */
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code;  /* DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4 */
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides;      /* NULL: compact row-major */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

enum { kDLUInt = 1 };

/* ---- the capsule ------------------------------------------------------------------ */

char gnpy_zero_byte; /* data pointer of zero-size host tensors: never NULL */

struct dl_holder {
	DLManagedTensor mt;
	int64_t shape[1];
	PyObject *owner;
};

/* The consumer is done with the memory. May run on any thread (torch frees
 * tensors from its own), so take the GIL; after interpreter shutdown there
 * is nothing left to release. */
static void dl_deleter(DLManagedTensor *self)
{
	struct dl_holder *h = self->manager_ctx;
	if (!h)
		return;
#if PY_VERSION_HEX >= 0x030D0000
	int gone = !Py_IsInitialized() || Py_IsFinalizing();
#else
	int gone = !Py_IsInitialized() || _Py_IsFinalizing();
#endif
	if (!gone) {
		PyGILState_STATE g = PyGILState_Ensure();
		Py_XDECREF(h->owner);
		PyGILState_Release(g);
	}
	free(h);
}

/* A capsule never consumed ("dltensor" still) owns its tensor; a consumed
 * one was renamed "used_dltensor" and the consumer calls the deleter. */
static void dl_capsule_destructor(PyObject *cap)
{
	if (!PyCapsule_IsValid(cap, "dltensor"))
		return;
	PyObject *et, *ev, *tb;
	PyErr_Fetch(&et, &ev, &tb);
	DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
	if (mt && mt->deleter)
		mt->deleter(mt);
	else if (!mt)
		PyErr_WriteUnraisable(cap);
	PyErr_Restore(et, ev, tb);
}

/* __dlpack__ of nbytes of uint8 at p on (dt, id), kept alive by owner:
 * the one capsule builder for tensors and views. */
PyObject *gnpy_dl_export(PyObject *args, PyObject *kw, void *p, uint64_t nbytes, int32_t dt, int32_t id,
			 PyObject *owner)
{
	static char *kwlist[] = { "stream", "max_version", "dl_device", "copy", NULL };
	PyObject *stream = Py_None, *maxv = Py_None, *dl_device = Py_None, *copy = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO", kwlist, &stream, &maxv, &dl_device, &copy))
		return NULL;
	if (copy == Py_True)
		return gnpy_raise_err(ENOTSUP, "__dlpack__(copy=True): gpunvme tensors are exported without a copy");
	struct dl_holder *h = calloc(1, sizeof(*h));
	if (!h)
		return PyErr_NoMemory();
	if (!p && dt == kDLCPU)
		p = &gnpy_zero_byte;
	h->shape[0] = (int64_t)nbytes;
	h->mt.dl_tensor = (DLTensor){
		.data = p,
		.device = { dt, id },
		.ndim = 1,
		.dtype = { kDLUInt, 8, 1 },
		.shape = h->shape,
		.strides = NULL,
		.byte_offset = 0,
	};
	h->mt.manager_ctx = h;
	h->mt.deleter = dl_deleter;
	Py_INCREF(owner);
	h->owner = owner;
	PyObject *cap = PyCapsule_New(&h->mt, "dltensor", dl_capsule_destructor);
	if (!cap) {
		Py_DECREF(h->owner);
		free(h);
	}
	return cap;
}
