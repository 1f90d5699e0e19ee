/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme.Experts: a mixture-of-experts model's expert index
 * (moe.h) and an expert cache over a Model: on the CPU tier the host cache
 * (get() copies experts out), on Tier 2 the GPU expert cache (moe_gpu.h:
 * fetch() queues the reads of the experts whose ids are in GPU memory; the
 * slot memory is exported through DLPack). The Python layer
 * (gpunvme/_moe.py) gives the bytes dtype and shape.
 */
#include "_gpunvme.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/moe.h"
#include "gpunvme/moe_gpu.h"
#include "gpunvme/tier.h"

typedef struct {
	PyObject_HEAD
	Model *model;
	struct gpunvme_moe_index *x;
	struct gpunvme_layer_loader *l;
	struct gpunvme_expert_cache *c;
	struct gpunvme_gpu_experts *g; /* Tier 2: the GPU expert cache instead of c */
	int tier, device;
	uint32_t slots;
} Experts;

static int need_gpu(Experts *ex)
{
	if (!ex->g) {
		gnpy_raise_err(EINVAL, "this expert cache is on the CPU tier: get() reads experts; fetch(), sync() and the "
				       "slot memory are the GPU cache's (tier 1 or 2)");
		return -1;
	}
	return 0;
}

/* Experts(model, slots, tier=0, device=0): the index (gpunvme.Error for a
 * model without experts or a layout the index cannot serve) and a cache of
 * `slots` experts: the host cache (tier 0) or the GPU cache on CUDA device
 * `device`, its slots in GPU memory (tier 2), in pinned host memory the GPU
 * reads in place (tier 1), or where the tier policy puts them (-1) */
static PyObject *Experts_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "model", "slots", "tier", "device", NULL };
	Model *mo;
	unsigned int slots;
	int tier = GPUNVME_TIER_CPU, device = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!I|ii", kwlist, &gnpy_ModelType, &mo, &slots, &tier, &device))
		return NULL;
	if (!slots)
		return gnpy_raise_err(EINVAL, "slots=0: give room for at least the experts one token uses");
	if (tier < GPUNVME_TIER_AUTO || tier > GPUNVME_TIER_2)
		return gnpy_raise_err(EINVAL, "tier %d: expected 0 (the CPU cache), 1 (slots in pinned host memory), 2 "
					      "(slots in GPU memory) or -1 (the tier policy picks)", tier);
	if (gnpy_vol_usable(mo->vol) || gnpy_tier_built(tier))
		return NULL;
	Experts *ex = (Experts *)type->tp_alloc(type, 0);
	if (!ex)
		return NULL;
	Py_INCREF(mo);
	ex->model = mo;
	ex->slots = slots;
	ex->tier = tier;
	ex->device = device;
	Volume *v = mo->vol;
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	/* the queue pairs a parked loader holds back first (_gpunvme_loader.c) */
	gnpy_loader_unpark(v);
	if ((rc = gpunvme_moe_index_build(mo->m, &ex->x))) {
		snprintf(err, LASTERR_LEN, "%s: %s", mo->path, gpunvme_last_error());
	} else if (tier != GPUNVME_TIER_CPU) {
		/* the message names the volume's controllers and the fix */
		rc = gnpy_gpu_experts_open(v->vol, ex->x, mo->ext, mo->n_ext, mo->size, slots, tier, device, &ex->g, err);
	} else {
		struct gpunvme_loader_opts o;
		gpunvme_loader_opts_init(&o);
		o.tier = GPUNVME_TIER_CPU;
		if ((rc = gpunvme_layer_loader_init_volume(v->vol, mo->ext, mo->n_ext, mo->size, &o, &ex->l)) ||
		    (rc = gpunvme_expert_cache_open(ex->x, ex->l, slots, &ex->c)))
			snprintf(err, LASTERR_LEN, "%s: %s", mo->path, gpunvme_last_error());
		else
			gpunvme_layer_loader_release_queues(ex->l); /* taken again at the next read */
	}
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(ex);
		return gnpy_raise_err(rc, "%s", err);
	}
	if (ex->g) {
		/* the tier the policy picked (or the one asked for) */
		uint8_t *base;
		const uint64_t *off;
		uint64_t sb;
		gnpy_gpu_experts_layout(ex->g, &base, &off, &sb, &ex->tier);
	}
	return (PyObject *)ex;
}

static void Experts_dealloc(Experts *ex)
{
	if (ex->model) {
		pthread_mutex_t *lk = &ex->model->vol->lock;
		pthread_mutex_lock(lk);
		gnpy_gpu_experts_close(ex->g, ex->device);
		gpunvme_expert_cache_close(ex->c);
		gpunvme_layer_loader_destroy(ex->l);
		pthread_mutex_unlock(lk);
	}
	gpunvme_moe_index_free(ex->x);
	Py_XDECREF(ex->model);
	Py_TYPE(ex)->tp_free((PyObject *)ex);
}

/* index() -> {"layout", "layers", "n_experts", "projections", "max_expert_bytes"} */
static PyObject *Experts_index(Experts *ex, PyObject *unused)
{
	(void)unused;
	const struct gpunvme_moe_index *x = ex->x;
	PyObject *layers = PyList_New(x->n_layers), *proj = PyList_New(x->n_proj);
	for (uint32_t i = 0; layers && i < x->n_layers; i++)
		PyList_SET_ITEM(layers, i, PyLong_FromUnsignedLong(x->layer[i]));
	for (uint32_t p = 0; proj && p < x->n_proj; p++)
		PyList_SET_ITEM(proj, p, PyUnicode_DecodeUTF8(x->proj[p], (Py_ssize_t)strlen(x->proj[p]), "surrogateescape"));
	if (!layers || !proj) {
		Py_XDECREF(layers);
		Py_XDECREF(proj);
		return NULL;
	}
	return Py_BuildValue("{s:s,s:N,s:I,s:N,s:K}", "layout", gpunvme_moe_layout_str(x->layout), "layers", layers,
			     "n_experts",
			     x->n_experts, "projections", proj, "max_expert_bytes", (unsigned long long)x->max_expert_bytes);
}

/* The MoE layer index of the model's layer number, or -1 with the error. */
static int layer_of(Experts *ex, unsigned int layer)
{
	int i = gpunvme_moe_layer_find(ex->x, layer);
	if (i < 0)
		gnpy_raise_err(EINVAL, "layer %u has no experts (the MoE layers: %u of them, from %u to %u)", layer,
			       ex->x->n_layers, ex->x->layer[0], ex->x->layer[ex->x->n_layers - 1]);
	return i;
}

/* The MoE layer index of (layer, expert), both checked, or -1 with the error. */
static int expert_of(Experts *ex, unsigned int layer, unsigned int e)
{
	int i = layer_of(ex, layer);
	if (i >= 0 && e >= ex->x->n_experts) {
		gnpy_raise_err(EINVAL, "expert %u: layer %u has %u experts", e, layer, ex->x->n_experts);
		return -1;
	}
	return i;
}

/* The arguments (layer, expert) -> the MoE layer index *i and the expert
 * *e, both checked; -1 with the error. */
static int layer_expert_args(Experts *ex, PyObject *args, int *i, unsigned int *e)
{
	unsigned int layer;
	if (!PyArg_ParseTuple(args, "II", &layer, e))
		return -1;
	*i = expert_of(ex, layer, *e);
	return *i < 0 ? -1 : 0;
}

/* pieces(layer, expert) -> [(tensor_index, offset, nbytes)] in projection order */
static PyObject *Experts_pieces(Experts *ex, PyObject *args)
{
	int i;
	unsigned int e;
	if (layer_expert_args(ex, args, &i, &e))
		return NULL;
	const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(ex->x, (uint32_t)i, e);
	PyObject *list = PyList_New(ex->x->n_proj);
	for (uint32_t p = 0; list && p < ex->x->n_proj; p++) {
		PyObject *it = Py_BuildValue("(IKK)", pc[p].tensor, (unsigned long long)pc[p].offset,
					     (unsigned long long)pc[p].bytes);
		if (!it) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, p, it);
	}
	return list;
}

/* get(layer, ids) -> [tuple of bytes per projection] per id: the experts
 * read through the cache (misses from the volume), copied out, so that a
 * later get evicting them cannot change what the caller holds */
static PyObject *Experts_get(Experts *ex, PyObject *args)
{
	unsigned int layer;
	PyObject *seq;
	if (!PyArg_ParseTuple(args, "IO", &layer, &seq))
		return NULL;
	int i = layer_of(ex, layer);
	if (i < 0)
		return NULL;
	if (!ex->c)
		return gnpy_raise_err(EINVAL, "this expert cache is in GPU memory: fetch() queues the reads of the ids the "
					      "router wrote on the GPU; get() is the CPU tier's");
	PyObject *fast = PySequence_Fast(seq, "ids: a sequence of expert numbers");
	if (!fast)
		return NULL;
	Py_ssize_t k = PySequence_Fast_GET_SIZE(fast);
	if (k > 4096) {
		Py_DECREF(fast);
		return gnpy_raise_err(EINVAL, "%zd experts in one request: at most 4096", k);
	}
	uint32_t *ids = malloc((size_t)(k ? k : 1) * sizeof(*ids)), *slots = malloc((size_t)(k ? k : 1) * sizeof(*slots));
	if (!ids || !slots) {
		free(ids);
		free(slots);
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t j = 0; j < k; j++) {
		unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, j));
		if (PyErr_Occurred() || v > UINT32_MAX) {
			free(ids);
			free(slots);
			Py_DECREF(fast);
			if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError) ||
			    PyErr_ExceptionMatches(PyExc_TypeError)) {
				PyErr_Clear();
				return gnpy_raise_err(EINVAL, "ids[%zd]: expected an expert number (0..%u)", j,
						      ex->x->n_experts - 1);
			}
			return NULL;
		}
		ids[j] = (uint32_t)v;
	}
	Py_DECREF(fast);
	Volume *v = ex->model->vol;
	if (gnpy_vol_usable(v)) {
		free(ids);
		free(slots);
		return NULL;
	}
	const uint32_t np = ex->x->n_proj;
	/* The result, made before the reads: one bytearray per projection of
	 * each expert, filled under the lock (another get could evict them)
	 * with the GIL released -- nothing else holds them yet. One copy out
	 * of the slot, and a buffer numpy and torch.frombuffer take as it is
	 * (writable, no second copy). An id out of range gets none: the
	 * cache's own check refuses it below. */
	bool ids_ok = true;
	for (Py_ssize_t j = 0; j < k; j++)
		ids_ok &= ids[j] < ex->x->n_experts;
	PyObject *out = PyList_New(k);
	uint8_t **dst = calloc((size_t)(k ? k : 1) * np, sizeof(*dst));
	for (Py_ssize_t j = 0; out && dst && ids_ok && j < k; j++) {
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(ex->x, (uint32_t)i, ids[j]);
		PyObject *t = PyTuple_New(np);
		for (uint32_t p = 0; t && p < np; p++) {
			PyObject *b = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)pc[p].bytes);
			if (!b) {
				Py_CLEAR(t);
				break;
			}
			dst[(size_t)j * np + p] = (uint8_t *)PyByteArray_AS_STRING(b);
			PyTuple_SET_ITEM(t, p, b);
		}
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, j, t);
	}
	if (!out || !dst) {
		Py_XDECREF(out);
		free(dst);
		free(ids);
		free(slots);
		return PyErr_Occurred() ? NULL : PyErr_NoMemory();
	}
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	if ((rc = gpunvme_expert_cache_get(ex->c, (uint32_t)i, ids, (uint32_t)k, slots)))
		snprintf(err, LASTERR_LEN, "%s: %s", ex->model->path, gpunvme_last_error());
	for (Py_ssize_t j = 0; !rc && j < k; j++) {
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(ex->x, (uint32_t)i, ids[j]);
		for (uint32_t p = 0; p < np; p++)
			memcpy(dst[(size_t)j * np + p], gpunvme_expert_cache_piece(ex->c, slots[j], p), pc[p].bytes);
	}
	if (ex->l)
		gpunvme_layer_loader_release_queues(ex->l);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	free(dst);
	if (rc)
		Py_CLEAR(out);
	free(ids);
	free(slots);
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	return out;
}

/* stats() -> {"requests", "hits", "misses", "evictions", "bytes_read", "slots"} */
static PyObject *Experts_stats(Experts *ex, PyObject *unused)
{
	(void)unused;
	struct gpunvme_expert_cache_stats st;
	if (ex->g)
		return gnpy_raise_err(EINVAL, "the GPU cache's statistics come from sync(): it waits for the stream");
	gpunvme_expert_cache_stats(ex->c, &st);
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:I}", "requests", (unsigned long long)st.requests, "hits",
			     (unsigned long long)st.hits, "misses", (unsigned long long)st.misses, "evictions",
			     (unsigned long long)st.evictions, "bytes_read", (unsigned long long)st.bytes_read, "slots",
			     ex->slots);
}

/* fetch(layer, ids_ptr, k, slots_ptr, stream_ptr): GPU cache; queue the
 * reads of the k expert ids at ids_ptr (GPU memory, uint32) of the model's
 * layer `layer`, their slots written to slots_ptr (uint32), on the CUDA
 * stream stream_ptr (0: the legacy default stream). Returns at once. */
static PyObject *Experts_fetch(Experts *ex, PyObject *args)
{
	unsigned int layer, k;
	unsigned long long ids, slots, stream;
	if (!PyArg_ParseTuple(args, "IKIKK", &layer, &ids, &k, &slots, &stream))
		return NULL;
	if (need_gpu(ex))
		return NULL;
	int i = layer_of(ex, layer);
	if (i < 0)
		return NULL;
	char err[LASTERR_LEN];
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = gnpy_gpu_experts_fetch(ex->g, ex->device, (uint32_t)i, (uintptr_t)ids, k, (uintptr_t)slots, (uintptr_t)stream,
				    err);
	Py_END_ALLOW_THREADS
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	Py_RETURN_NONE;
}

/* sync(stream_ptr) -> stats: GPU cache; wait (bounded) for the stream and
 * raise the first failure of the fetches since the last sync */
static PyObject *Experts_sync(Experts *ex, PyObject *args)
{
	unsigned long long stream = 0;
	if (!PyArg_ParseTuple(args, "|K", &stream))
		return NULL;
	if (need_gpu(ex))
		return NULL;
	char err[LASTERR_LEN];
	struct gpunvme_gpu_experts_stats st;
	memset(&st, 0, sizeof(st));
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = gnpy_gpu_experts_sync(ex->g, ex->device, (uintptr_t)stream, &st, err);
	Py_END_ALLOW_THREADS
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,s:I}", "requests", (unsigned long long)st.cache.requests,
			     "hits", (unsigned long long)st.cache.hits, "misses", (unsigned long long)st.cache.misses,
			     "evictions", (unsigned long long)st.cache.evictions, "bytes_read",
			     (unsigned long long)st.cache.bytes_read, "commands", (unsigned long long)st.commands,
			     "stall_s", (double)st.stall_ns * 1e-9, "stalled", (unsigned long long)st.stalled, "slots",
			     ex->slots);
}

/* place(layer, expert) -> [offset of each projection in a slot]
 * (gpunvme_moe_place): where an expert's pieces sit in whichever slot */
static PyObject *Experts_place(Experts *ex, PyObject *args)
{
	int i;
	unsigned int e;
	if (layer_expert_args(ex, args, &i, &e))
		return NULL;
	uint64_t pos[GPUNVME_MOE_MAX_PROJ];
	gpunvme_moe_place(ex->x, (uint32_t)i, e, pos);
	PyObject *list = PyList_New(ex->x->n_proj);
	for (uint32_t p = 0; list && p < ex->x->n_proj; p++) {
		PyObject *it = PyLong_FromUnsignedLongLong(pos[p]);
		if (!it) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, p, it);
	}
	return list;
}

/* tier() -> 0 (the CPU cache), 1 or 2 (the GPU cache's slots in pinned host
 * or in GPU memory) */
static PyObject *Experts_tier(Experts *ex, PyObject *unused)
{
	(void)unused;
	return PyLong_FromLong(ex->tier);
}

/* layout() -> (slot_bytes, slots): GPU cache; slot s at s * slot_bytes */
static PyObject *Experts_layout(Experts *ex, PyObject *unused)
{
	(void)unused;
	if (need_gpu(ex))
		return NULL;
	uint8_t *base;
	const uint64_t *off;
	uint64_t sb;
	int tier;
	gnpy_gpu_experts_layout(ex->g, &base, &off, &sb, &tier);
	return Py_BuildValue("(KI)", (unsigned long long)sb, ex->slots);
}

/* __dlpack__: the GPU cache's slot memory (slots * slot_bytes) as a 1-D
 * uint8 CUDA tensor; its contents change with every fetch (stream-ordered).
 * On tier 1 the slots are pinned host memory mapped into the GPU's address
 * space: the pointer is the mapping's device address (unified addressing),
 * so a CUDA tensor over it is read by kernels in place, over the link */
static PyObject *Experts_dlpack(Experts *ex, PyObject *args, PyObject *kw)
{
	if (need_gpu(ex))
		return NULL;
	uint8_t *base;
	const uint64_t *off;
	uint64_t sb;
	int tier;
	gnpy_gpu_experts_layout(ex->g, &base, &off, &sb, &tier);
	return gnpy_dl_export(args, kw, base, sb * ex->slots, kDLCUDA, ex->device, (PyObject *)ex);
}

static PyObject *Experts_dlpack_device(Experts *ex, PyObject *unused)
{
	(void)unused;
	if (need_gpu(ex))
		return NULL;
	return Py_BuildValue("(ii)", (int)kDLCUDA, ex->device);
}

static PyMethodDef Experts_methods[] = {
	{ "fetch", (PyCFunction)Experts_fetch, METH_VARARGS,
	  "fetch(layer, ids_ptr, k, slots_ptr, stream_ptr): GPU cache, queue the reads of the router's ids" },
	{ "sync", (PyCFunction)Experts_sync, METH_VARARGS, "sync(stream_ptr=0) -> stats: GPU cache, wait and report" },
	{ "place", (PyCFunction)Experts_place, METH_VARARGS, "place(layer, expert) -> [offset in a slot per projection]" },
	{ "layout", (PyCFunction)Experts_layout, METH_NOARGS, "layout() -> (slot_bytes, slots): GPU cache" },
	{ "tier", (PyCFunction)Experts_tier, METH_NOARGS,
	  "tier() -> 0 (CPU cache), 1 or 2 (the GPU cache's slots in pinned host or GPU memory)" },
	{ "__dlpack__", (PyCFunction)(void (*)(void))Experts_dlpack, METH_VARARGS | METH_KEYWORDS, NULL },
	{ "__dlpack_device__", (PyCFunction)Experts_dlpack_device, METH_NOARGS, NULL },
	{ "index", (PyCFunction)Experts_index, METH_NOARGS,
	  "index() -> {layout, layers, n_experts, projections, max_expert_bytes}" },
	{ "pieces", (PyCFunction)Experts_pieces, METH_VARARGS,
	  "pieces(layer, expert) -> [(tensor_index, offset, nbytes)] in projection order" },
	{ "get", (PyCFunction)Experts_get, METH_VARARGS,
	  "get(layer, ids) -> [(bytes per projection)] per id, read through the cache" },
	{ "stats", (PyCFunction)Experts_stats, METH_NOARGS, "stats() -> dict" },
	{ NULL, NULL, 0, NULL },
};

PyTypeObject gnpy_ExpertsType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Experts",
	.tp_basicsize = sizeof(Experts),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Experts(model, slots): a mixture-of-experts model's expert index and a CPU-tier expert cache",
	.tp_new = Experts_new,
	.tp_dealloc = (destructor)Experts_dealloc,
	.tp_methods = Experts_methods,
};
