/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme.Stream and View: a layer stream (gpunvme/stream.h) over
 * a Model, its own loader with K slots and the resident tensors, and the
 * DLPack exporter of bytes inside its memory.
 */
#include "_gpunvme.h"

#include <errno.h>
#include <stdio.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"
#include "gpunvme/stream.h"
#include "gpunvme/tier.h"

/* ---- Stream: a layer stream (gpunvme/stream.h) -------------------------------------- */

typedef struct {
	PyObject_HEAD
	Model *model;
	struct gpunvme_layer_stream *s;
	int tier;          /* in use (after a Tier 2 -> 1 fallback) */
	int device;
} Stream;

/* View: a DLPack exporter of bytes inside a stream's memory (a slot or the
 * resident tensors). Holds the Stream, so the memory outlives every view;
 * a slot's bytes are those of the layer until it is released. */
typedef struct {
	PyObject_HEAD
	Stream *owner;
	void *p;
	uint64_t nbytes;
} View;

static pthread_mutex_t *stream_lock(Stream *st)
{
	return &st->model->vol->lock;
}

/* A stream keeps its controller (through its Model) after Volume.close():
 * it was opened while the volume was, and reads only its own model. */
static int stream_usable(Stream *st)
{
	if (!st->s) {
		gnpy_raise_err(EBADF, "this layer stream is closed");
		return -1;
	}
	return 0;
}

/* Stream(model, layers, resident, window, tier, device=0, queues=0, depth=0, no_fallback=0):
 * resident None = every tensor outside the layers */
static PyObject *Stream_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "model", "layers", "resident", "window", "tier", "device", "queues", "depth",
				  "no_fallback", "sync_reads", NULL };
	Model *mo;
	const char *layers, *resident = NULL;
	unsigned int window, queues = 0, depth = 0;
	int tier, device = 0, no_fallback = 0, sync_reads = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!szIi|iIIpp", kwlist, &gnpy_ModelType, &mo, &layers, &resident,
					 &window, &tier, &device, &queues, &depth, &no_fallback, &sync_reads))
		return NULL;
	if (tier < GPUNVME_TIER_AUTO || tier > 2)
		return gnpy_raise_err(EINVAL, "tier %d: expected -1 (auto: the tier policy), 0 (CPU), 1 (pinned host memory) "
				      "or 2 (GPU memory)", tier);
	if (gnpy_vol_usable(mo->vol))
		return NULL;
	if (gnpy_tier_built(tier))
		return NULL;
	Stream *st = (Stream *)type->tp_alloc(type, 0);
	if (!st)
		return NULL;
	Py_INCREF(mo);
	st->model = mo;
	st->tier = tier;
	st->device = device;
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&mo->vol->lock);
	struct gpunvme_stream_opts o;
	gpunvme_stream_opts_init(&o);
	o.layers = layers;
	o.resident = resident;
	o.window = window;
	o.no_fallback = no_fallback;
	o.sync_reads = sync_reads;
	o.loader.tier = (enum gpunvme_tier)tier;
	o.loader.queues = queues;
	o.loader.depth = depth;
	rc = gnpy_gpu_prepare(tier, device, &o.loader.gpu, err);
	if (!rc) {
		Volume *v = mo->vol;
		/* the queue pairs a parked loader holds back first: a stream
		 * takes many (_gpunvme_loader.c) */
		gnpy_loader_unpark(v);
		/* an array: every member read from its own controller */
		rc = gpunvme_layer_stream_open_volume(v->vol, mo->m, mo->ext, mo->n_ext, mo->size, &o, &st->s);
		if (rc) {
			snprintf(err, LASTERR_LEN, "%s: layer stream: %s", mo->path, gpunvme_last_error());
		} else {
			struct gpunvme_stream_stats ss;
			gpunvme_layer_stream_stats(st->s, &ss);
			st->tier = (int)ss.tier;
		}
	}
	pthread_mutex_unlock(&mo->vol->lock);
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(st);
		return gnpy_raise_err(rc, "%s", err);
	}
	return (PyObject *)st;
}

static void stream_close_locked(Stream *st)
{
	char err[LASTERR_LEN];
	gnpy_use_device(st->tier, st->device, err);
	gpunvme_layer_stream_close(st->s);
	st->s = NULL;
}

static void Stream_dealloc(Stream *st)
{
	if (st->s) {
		pthread_mutex_t *lk = stream_lock(st);
		pthread_mutex_lock(lk);
		stream_close_locked(st);
		pthread_mutex_unlock(lk);
	}
	Py_XDECREF(st->model);
	Py_TYPE(st)->tp_free((PyObject *)st);
}

static PyObject *view_new(Stream *st, void *p, uint64_t nbytes)
{
	View *v = PyObject_New(View, &gnpy_ViewType);
	if (!v)
		return NULL;
	Py_INCREF(st);
	v->owner = st;
	v->p = p;
	v->nbytes = nbytes;
	return (PyObject *)v;
}

/* [(model tensor index, View)] for n tensors of the model */
static PyObject *views_list(Stream *st, const struct gpunvme_tensor *const *t, void *const *ptr, size_t n)
{
	PyObject *out = PyList_New((Py_ssize_t)n);
	if (!out)
		return NULL;
	for (size_t k = 0; k < n; k++) {
		PyObject *v = view_new(st, ptr[k], t[k]->bytes);
		PyObject *item = v ? Py_BuildValue("(nN)", (Py_ssize_t)(t[k] - st->model->m->tensors), v) : NULL;
		if (!item) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, (Py_ssize_t)k, item);
	}
	return out;
}

static PyObject *Stream_resident(Stream *st, PyObject *unused)
{
	(void)unused;
	if (stream_usable(st))
		return NULL;
	const struct gpunvme_model_buffers *b = gpunvme_layer_stream_resident(st->s);
	if (!b)
		return PyList_New(0);
	return views_list(st, b->tensors, b->ptr, b->n_tensors);
}

enum { S_ACQUIRE, S_RELEASE, S_CHECK };

/* One call on layer i with the GIL released, under the volume's lock, on
 * the stream's device; err holds the message when it fails. */
static int stream_layer_op(Stream *st, int op, unsigned int i, unsigned long long cs,
			   const struct gpunvme_stream_layer **L, char *err)
{
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(stream_lock(st));
	rc = gnpy_use_device(st->tier, st->device, err);
	if (!rc) {
		void *s = (void *)(uintptr_t)cs;
		rc = op == S_ACQUIRE   ? gpunvme_layer_stream_acquire(st->s, i, s, L)
		     : op == S_RELEASE ? gpunvme_layer_stream_release(st->s, i, s, NULL)
					: gpunvme_layer_stream_check(st->s, i);
		if (rc)
			snprintf(err, LASTERR_LEN, "%s: layer %u: %s", st->model->path, i, gpunvme_last_error());
	}
	pthread_mutex_unlock(stream_lock(st));
	Py_END_ALLOW_THREADS
	return rc;
}

/* acquire(i, stream=0) -> [(tensor index, View)]; stream: a cudaStream_t as an int (0: default) */
static PyObject *Stream_acquire(Stream *st, PyObject *args)
{
	unsigned int i;
	unsigned long long cs = 0;
	if (!PyArg_ParseTuple(args, "I|K", &i, &cs) || stream_usable(st))
		return NULL;
	char err[LASTERR_LEN];
	const struct gpunvme_stream_layer *L = NULL;
	int rc = stream_layer_op(st, S_ACQUIRE, i, cs, &L, err);
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	return views_list(st, L->tensors, L->ptr, L->n_tensors);
}

/* release(i, stream=0) / check(i), which return None */
static PyObject *stream_layer_none(Stream *st, PyObject *args, int op)
{
	unsigned int i;
	unsigned long long cs = 0;
	if (!PyArg_ParseTuple(args, op == S_CHECK ? "I" : "I|K", &i, &cs) || stream_usable(st))
		return NULL;
	char err[LASTERR_LEN];
	int rc = stream_layer_op(st, op, i, cs, NULL, err);
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	Py_RETURN_NONE;
}

/* release(i, stream=0): the slot is reused once `stream`'s work queued so far has run */
static PyObject *Stream_release(Stream *st, PyObject *args)
{
	return stream_layer_none(st, args, S_RELEASE);
}

/* check(i): wait for layer i's reads; raise any read failure so far */
static PyObject *Stream_check(Stream *st, PyObject *args)
{
	return stream_layer_none(st, args, S_CHECK);
}

static PyObject *Stream_stats(Stream *st, PyObject *unused)
{
	(void)unused;
	if (stream_usable(st))
		return NULL;
	struct gpunvme_stream_stats ss;
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(stream_lock(st));
	rc = gnpy_use_device(st->tier, st->device, err);
	if (!rc && (rc = gpunvme_layer_stream_stats(st->s, &ss)))
		snprintf(err, LASTERR_LEN, "%s: %s", st->model->path, gpunvme_last_error());
	pthread_mutex_unlock(stream_lock(st));
	Py_END_ALLOW_THREADS
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	return Py_BuildValue("{s:i,s:O,s:I,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:d,s:K,s:K}", "tier", (int)ss.tier,
			     "fell_back", ss.fell_back ? Py_True : Py_False, "layers", ss.layers, "window", ss.window,
			     "slot_bytes", (unsigned long long)ss.slot_bytes, "memory_bytes",
			     (unsigned long long)ss.memory_bytes, "bounce_bytes", (unsigned long long)ss.bounce_bytes,
			     "resident_bytes", (unsigned long long)ss.resident_bytes, "layer_loads",
			     (unsigned long long)ss.layer_loads, "bytes_read", (unsigned long long)ss.bytes_read,
			     "acquires", (unsigned long long)ss.acquires, "restarts", (unsigned long long)ss.restarts,
			     "io_ms", ss.io_ms, "stall_ms", ss.stall_ms, "overlap", ss.overlap, "retries",
			     (unsigned long long)ss.retries, "resets", (unsigned long long)ss.resets);
}

static PyObject *Stream_n_layers(Stream *st, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLong(st->s ? gpunvme_layer_stream_layers(st->s) : 0);
}

static PyObject *Stream_tier(Stream *st, void *unused)
{
	(void)unused;
	return PyLong_FromLong(st->tier);
}

static void View_dealloc(View *v)
{
	Py_XDECREF(v->owner);
	PyObject_Free(v);
}

static void view_device(View *v, int32_t *type, int32_t *id)
{
	*type = v->owner->tier == GPUNVME_TIER_2 ? kDLCUDA : kDLCPU;
	*id = v->owner->tier == GPUNVME_TIER_2 ? v->owner->device : 0;
}

/* __dlpack__: as Tensor's; the bytes are ordered for the stream given to
 * acquire() (the library made it wait for the reads) */
static PyObject *View_dlpack(View *v, PyObject *args, PyObject *kw)
{
	int32_t dt, id;
	view_device(v, &dt, &id);
	return gnpy_dl_export(args, kw, v->p ? v->p : &gnpy_zero_byte, v->nbytes, dt, id, (PyObject *)v->owner);
}

static PyObject *View_dlpack_device(View *v, PyObject *unused)
{
	(void)unused;
	int32_t dt, id;
	view_device(v, &dt, &id);
	return Py_BuildValue("(ii)", dt, id);
}

static PyObject *View_nbytes(View *v, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(v->nbytes);
}

/* ---- the types -------------------------------------------------------------------- */

static PyMethodDef Stream_methods[] = {
	{ "resident", (PyCFunction)Stream_resident, METH_NOARGS, "resident() -> [(tensor index, View)]" },
	{ "acquire", (PyCFunction)Stream_acquire, METH_VARARGS,
	  "acquire(i, stream=0) -> [(tensor index, View)]: layer i, ordered on the CUDA stream (an int)" },
	{ "release", (PyCFunction)Stream_release, METH_VARARGS,
	  "release(i, stream=0): the slot is refilled after the stream's work queued so far" },
	{ "check", (PyCFunction)Stream_check, METH_VARARGS,
	  "check(i): wait for layer i's reads; raise the first read failure so far" },
	{ "stats", (PyCFunction)Stream_stats, METH_NOARGS, "stats() -> dict" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Stream_getset[] = {
	{ "n_layers", (getter)Stream_n_layers, NULL, NULL, NULL },
	{ "tier", (getter)Stream_tier, NULL, "the tier in use (2 may have fallen back to 1)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject gnpy_StreamType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Stream",
	.tp_basicsize = sizeof(Stream),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Stream(model, layers, resident, window, tier, device=0, queues=0, depth=0, no_fallback=False, "
		  "sync_reads=False)",
	.tp_new = Stream_new,
	.tp_dealloc = (destructor)Stream_dealloc,
	.tp_methods = Stream_methods,
	.tp_getset = Stream_getset,
};

static PyMethodDef View_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))View_dlpack, METH_VARARGS | METH_KEYWORDS, NULL },
	{ "__dlpack_device__", (PyCFunction)View_dlpack_device, METH_NOARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef View_getset[] = {
	{ "nbytes", (getter)View_nbytes, NULL, NULL, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject gnpy_ViewType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.View",
	.tp_basicsize = sizeof(View),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "DLPack exporter of a stream tensor's bytes (1-D uint8)",
	.tp_dealloc = (destructor)View_dealloc,
	.tp_methods = View_methods,
	.tp_getset = View_getset,
};
