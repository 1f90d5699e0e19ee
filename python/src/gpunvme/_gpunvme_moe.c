/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme.Experts: a mixture-of-experts model's expert index
 * (moe.h) and an expert cache on the CPU tier over a Model. The Python layer
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
#include "gpunvme/tier.h"

typedef struct {
	PyObject_HEAD
	Model *model;
	struct gpunvme_moe_index *x;
	struct gpunvme_layer_loader *l;
	struct gpunvme_expert_cache *c;
	uint32_t slots;
} Experts;

/* Experts(model, slots): the index (ValueError-like gpunvme.Error for a
 * model without experts or a layout the index cannot serve) and a cache of
 * `slots` experts on the CPU tier */
static PyObject *Experts_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "model", "slots", NULL };
	Model *mo;
	unsigned int slots;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!I", kwlist, &gnpy_ModelType, &mo, &slots))
		return NULL;
	if (!slots)
		return gnpy_raise_err(EINVAL, "slots=0: give room for at least the experts one token uses");
	if (gnpy_vol_usable(mo->vol))
		return NULL;
	Experts *ex = (Experts *)type->tp_alloc(type, 0);
	if (!ex)
		return NULL;
	Py_INCREF(mo);
	ex->model = mo;
	ex->slots = slots;
	Volume *v = mo->vol;
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	if ((rc = gpunvme_moe_index_build(mo->m, &ex->x))) {
		snprintf(err, LASTERR_LEN, "%s: %s", mo->path, gpunvme_last_error());
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
	return (PyObject *)ex;
}

static void Experts_dealloc(Experts *ex)
{
	if (ex->model) {
		pthread_mutex_t *lk = &ex->model->vol->lock;
		pthread_mutex_lock(lk);
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
	return Py_BuildValue("{s:s,s:N,s:I,s:N,s:K}", "layout",
			     x->layout == GPUNVME_MOE_PER_EXPERT ? "per-expert" : "stacked", "layers", layers, "n_experts",
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

/* pieces(layer, expert) -> [(tensor_index, offset, nbytes)] in projection order */
static PyObject *Experts_pieces(Experts *ex, PyObject *args)
{
	unsigned int layer, e;
	if (!PyArg_ParseTuple(args, "II", &layer, &e))
		return NULL;
	int i = layer_of(ex, layer);
	if (i < 0)
		return NULL;
	if (e >= ex->x->n_experts)
		return gnpy_raise_err(EINVAL, "expert %u: layer %u has %u experts", e, layer, ex->x->n_experts);
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
	/* copied out under the lock (another get could evict them) */
	uint8_t **copy = calloc((size_t)(k ? k : 1) * np, sizeof(*copy));
	char err[LASTERR_LEN];
	int rc = copy ? 0 : -ENOMEM;
	if (!copy)
		snprintf(err, LASTERR_LEN, "out of memory");
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	if (!rc && (rc = gpunvme_expert_cache_get(ex->c, (uint32_t)i, ids, (uint32_t)k, slots)))
		snprintf(err, LASTERR_LEN, "%s: %s", ex->model->path, gpunvme_last_error());
	for (Py_ssize_t j = 0; !rc && j < k; j++) {
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(ex->x, (uint32_t)i, ids[j]);
		for (uint32_t p = 0; p < np && !rc; p++) {
			uint8_t *b = malloc(pc[p].bytes ? pc[p].bytes : 1);
			if (!b) {
				rc = -ENOMEM;
				snprintf(err, LASTERR_LEN, "out of memory");
				break;
			}
			memcpy(b, gpunvme_expert_cache_piece(ex->c, slots[j], p), pc[p].bytes);
			copy[(size_t)j * np + p] = b;
		}
	}
	if (ex->l)
		gpunvme_layer_loader_release_queues(ex->l);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	PyObject *out = rc ? NULL : PyList_New(k);
	for (Py_ssize_t j = 0; out && j < k; j++) {
		PyObject *t = PyTuple_New(np);
		const struct gpunvme_moe_piece *pc = gpunvme_moe_expert(ex->x, (uint32_t)i, ids[j]);
		for (uint32_t p = 0; t && p < np; p++) {
			PyObject *b = PyBytes_FromStringAndSize((const char *)copy[(size_t)j * np + p], (Py_ssize_t)pc[p].bytes);
			if (!b) {
				Py_CLEAR(t);
				break;
			}
			PyTuple_SET_ITEM(t, p, b);
		}
		if (!t) {
			Py_CLEAR(out);
			break;
		}
		PyList_SET_ITEM(out, j, t);
	}
	for (size_t q = 0; copy && q < (size_t)k * np; q++)
		free(copy[q]);
	free(copy);
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
	gpunvme_expert_cache_stats(ex->c, &st);
	return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:I}", "requests", (unsigned long long)st.requests, "hits",
			     (unsigned long long)st.hits, "misses", (unsigned long long)st.misses, "evictions",
			     (unsigned long long)st.evictions, "bytes_read", (unsigned long long)st.bytes_read, "slots",
			     ex->slots);
}

static PyMethodDef Experts_methods[] = {
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
