/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme.Model: a model file's tensor index and extents, or a
 * model set's (a Hugging Face directory or index, a split GGUF), opened by
 * Volume.open_model; the index safe_open and the loaders read from.
 */
#include "_gpunvme.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/model.h"
#include "gpunvme/modelset.h"

/* ---- Model --------------------------------------------------------------------- */

/*
 * The one place a model path becomes an index + extents: the library's model
 * set (modelset.h) takes a single safetensors/GGUF file, a Hugging Face
 * directory or its index, or a split GGUF's shard, and lays every file out
 * in one address space a single loader reads. Lock held, no GIL.
 */
static int model_open(Volume *v, const char *path, Model *mo, char *err)
{
	int rc = gpunvme_model_set_open(v->fs, path, &mo->set);
	if (rc) {
		/* the library's message names the file it is about */
		const char *msg = gpunvme_last_error();
		snprintf(err, LASTERR_LEN, "%s%s%s", strstr(msg, path) ? "" : path, strstr(msg, path) ? "" : ": ", msg);
		return rc;
	}
	mo->m = mo->set->model;
	mo->ext = mo->set->ext;
	mo->n_ext = mo->set->n_ext;
	mo->size = mo->set->size;
	return 0;
}

PyObject *gnpy_model_open(Volume *v, const char *path)
{
	if (gnpy_vol_usable(v))
		return NULL;
	Model *mo = PyObject_New(Model, &gnpy_ModelType);
	if (!mo)
		return NULL;
	mo->vol = NULL;
	mo->set = NULL;
	mo->m = NULL;
	mo->ext = NULL;
	mo->n_ext = 0;
	mo->size = 0;
	mo->path = strdup(path);
	if (!mo->path) {
		Py_DECREF(mo);
		return PyErr_NoMemory();
	}
	char err[LASTERR_LEN];
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	rc = model_open(v, path, mo, err);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	Py_INCREF(v);
	static uint64_t uids; /* under the GIL */
	mo->uid = ++uids;
	mo->vol = v;
	v->nchild++;
	if (rc) {
		Py_DECREF(mo);
		return gnpy_raise_err(rc, "%s", err);
	}
	return (PyObject *)mo;
}

static void Model_dealloc(Model *mo)
{
	gpunvme_model_set_free(mo->set);
	free(mo->path);
	Volume *v = mo->vol;
	if (v) {
		if (--v->nchild == 0 && v->closed) {
			pthread_mutex_lock(&v->lock);
			gnpy_vol_release(v);
			pthread_mutex_unlock(&v->lock);
		}
		Py_DECREF(v);
	}
	PyObject_Free(mo);
}

static PyObject *str_or_bytes(const char *s)
{
	return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "surrogateescape");
}

/* tensors() -> [(name, dtype, shape, offset, bytes, ggml_type)] in header
 * order; shape as the file stores it (GGUF: ne[0] first) */
static PyObject *Model_tensors(Model *mo, PyObject *unused)
{
	(void)unused;
	PyObject *list = PyList_New((Py_ssize_t)mo->m->n_tensors);
	if (!list)
		return NULL;
	for (size_t i = 0; i < mo->m->n_tensors; i++) {
		const struct gpunvme_tensor *t = &mo->m->tensors[i];
		PyObject *shape = PyTuple_New(t->ndim);
		if (!shape) {
			Py_DECREF(list);
			return NULL;
		}
		for (uint32_t d = 0; d < t->ndim; d++)
			PyTuple_SET_ITEM(shape, d, PyLong_FromUnsignedLongLong(t->shape[d]));
		PyObject *name = str_or_bytes(t->name);
		PyObject *item = name ? Py_BuildValue("(NsNKKi)", name, t->dtype, shape, (unsigned long long)t->offset,
						      (unsigned long long)t->bytes, (int)t->ggml_type)
				      : NULL;
		if (!item) {
			if (!name)
				Py_DECREF(shape);
			Py_DECREF(list);
			return NULL;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, item);
	}
	return list;
}

/* metadata() -> {str: str} (safetensors __metadata__), or None */
static PyObject *Model_metadata(Model *mo, PyObject *unused)
{
	(void)unused;
	if (mo->m->format != GPUNVME_MODEL_SAFETENSORS || !mo->m->n_meta)
		Py_RETURN_NONE;
	PyObject *d = PyDict_New();
	for (size_t i = 0; d && i < mo->m->n_meta; i++) {
		PyObject *k = str_or_bytes(mo->m->meta[i].key), *val = str_or_bytes(mo->m->meta[i].value);
		if (!k || !val || PyDict_SetItem(d, k, val))
			Py_CLEAR(d);
		Py_XDECREF(k);
		Py_XDECREF(val);
	}
	return d;
}

static PyObject *Model_format(Model *mo, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(gpunvme_model_format_name(mo->m->format));
}

/* files() -> [(path, size)] of the set, in address order */
static PyObject *Model_files(Model *mo, PyObject *unused)
{
	(void)unused;
	PyObject *list = PyList_New((Py_ssize_t)mo->set->n_files);
	for (size_t i = 0; list && i < mo->set->n_files; i++) {
		PyObject *it = Py_BuildValue("(NK)", str_or_bytes(mo->set->files[i].path),
					     (unsigned long long)mo->set->files[i].size);
		if (!it) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, it);
	}
	return list;
}

static PyObject *Model_kind(Model *mo, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(mo->set->kind);
}

static PyObject *Model_path(Model *mo, void *unused)
{
	(void)unused;
	return str_or_bytes(mo->path);
}

/* the Volume it was opened on (loads of one volume share its lock) */
static PyObject *Model_volume(Model *mo, void *unused)
{
	(void)unused;
	Py_INCREF(mo->vol);
	return (PyObject *)mo->vol;
}

/* ---- the type -------------------------------------------------------------------- */

static PyMethodDef Model_methods[] = {
	{ "tensors", (PyCFunction)Model_tensors, METH_NOARGS,
	  "tensors() -> [(name, dtype, shape, offset, nbytes, ggml_type)], shape as stored" },
	{ "metadata", (PyCFunction)Model_metadata, METH_NOARGS, "metadata() -> dict or None" },
	{ "files", (PyCFunction)Model_files, METH_NOARGS, "files() -> [(path, size)]" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Model_getset[] = {
	{ "format", (getter)Model_format, NULL, "\"safetensors\" or \"gguf\"", NULL },
	{ "path", (getter)Model_path, NULL, NULL, NULL },
	{ "kind", (getter)Model_kind, NULL, "\"file\", \"hf-index\", \"hf-dir\" or \"gguf-split\"", NULL },
	{ "volume", (getter)Model_volume, NULL, "the Volume it was opened on", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject gnpy_ModelType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Model",
	.tp_basicsize = sizeof(Model),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A model file's tensor index (Volume.open_model)",
	.tp_dealloc = (destructor)Model_dealloc,
	.tp_methods = Model_methods,
	.tp_getset = Model_getset,
};
