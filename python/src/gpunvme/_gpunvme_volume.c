/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme.Volume: a controller (or md array), namespace and file
 * system, opened by gpunvme_volume_open; stat, listdir and read of small
 * files through the file system decoder, the tier policy, and open_model
 * (the Model itself is _gpunvme_model.c's).
 */
#include "_gpunvme.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"
#include "gpunvme/tier.h"
#include "gpunvme/volume.h"

/* The Python entry points below parse the path with gnpy_path_conv and call
 * these with its bytes, so every exit drops the bytes object in one place. */
#define PATH_METHOD(name, impl, fmt_default)                                            \
	static PyObject *name(Volume *v, PyObject *args)                                \
	{                                                                               \
		PyObject *pb = NULL;                                                    \
		if (!PyArg_ParseTuple(args, fmt_default, gnpy_path_conv, &pb))         \
			return NULL;                                                    \
		PyObject *r = impl(v, pb ? PyBytes_AS_STRING(pb) : "/");               \
		Py_XDECREF(pb);                                                         \
		return r;                                                               \
	}

/* ---- Volume -------------------------------------------------------------------- */

void gnpy_vol_release(Volume *v)
{
	gnpy_loader_unpark(v); /* its queues are on these controllers */
	gpunvme_volume_close(v->vol); /* an array's readers and controllers too */
	v->vol = NULL;
	v->md = NULL;
	v->fs = NULL;
	v->c = NULL;
}

int gnpy_vol_usable(Volume *v)
{
	if (v->closed || !v->fs) {
		gnpy_raise_err(EBADF, "the gpunvme.Volume (%s) is closed: open a new one", v->uri ? v->uri : "?");
		return -1;
	}
	return 0;
}

static int Volume_init(Volume *v, PyObject *args, PyObject *kw)
{
	/* offset -1: find the file system (at byte 0, or in the partition
	 * table: partition 0 = the one partition holding a file system) */
	static char *kwlist[] = { "uri", "nsid", "offset", "partition", NULL };
	const char *uri;
	unsigned int nsid = 1, partition = 0;
	long long offset = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ILI", kwlist, &uri, &nsid, &offset, &partition))
		return -1;
	if (v->c || v->uri) {
		gnpy_raise_err(EINVAL, "Volume.__init__ called twice");
		return -1;
	}
	if (!v->lock_init) {
		pthread_mutex_init(&v->lock, NULL);
		v->lock_init = true;
	}
	v->uri = strdup(uri);
	v->nsid = nsid;
	if (!v->uri) {
		PyErr_NoMemory();
		return -1;
	}
	char err[LASTERR_LEN] = "";
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	struct gpunvme_opts o;
	gpunvme_opts_init(&o);
	/* loaders take up to 8 queue pairs each, the file system reader one;
	 * the controller grants what it has */
	o.nr_io_queues = 64;
	struct gpunvme_volume_opts vo;
	gpunvme_volume_opts_init(&vo);
	vo.ctrl = &o;
	vo.nsid = nsid;
	vo.offset = offset < 0 ? GPUNVME_VOLUME_LOCATE : (uint64_t)offset;
	vo.partition = partition;
	if ((rc = gpunvme_volume_open(uri, NULL, &vo, &v->vol))) {
		gnpy_save_err(err);
	} else {
		v->fs = gpunvme_volume_fs(v->vol);
		v->md = gpunvme_volume_md(v->vol);
		/* an array's c is member 0's (the loader takes the array) */
		v->c = v->md ? v->md->c[0] : gpunvme_volume_ctrl(v->vol, 0);
	}
	Py_END_ALLOW_THREADS
	if (!rc)
		return 0;
	/* the volume's message names the step (controller, namespace N, md
	 * array, offset, partition N at byte B, file system) */
	gnpy_raise_err(rc == -ERANGE ? -EINVAL : rc, "%s: %s", uri, err);
	return -1;
}

static void Volume_dealloc(Volume *v)
{
	gnpy_vol_release(v);
	if (v->lock_init)
		pthread_mutex_destroy(&v->lock);
	free(v->uri);
	Py_TYPE(v)->tp_free((PyObject *)v);
}

static PyObject *Volume_close(Volume *v, PyObject *unused)
{
	(void)unused;
	v->closed = true;
	/* the controller goes now when nothing loaded from it lives, else with
	 * the last Model (Model_dealloc); no Loader will take the parked
	 * loader's queues now */
	pthread_mutex_lock(&v->lock);
	if (!v->nchild)
		gnpy_vol_release(v);
	else
		gnpy_loader_unpark(v);
	pthread_mutex_unlock(&v->lock);
	Py_RETURN_NONE;
}

static PyObject *Volume_closed(Volume *v, void *unused)
{
	(void)unused;
	return PyBool_FromLong(v->closed);
}

static PyObject *Volume_parked(Volume *v, void *unused)
{
	(void)unused;
	return gnpy_loader_parked(v);
}

static PyObject *Volume_fs_type(Volume *v, void *unused)
{
	(void)unused;
	if (gnpy_vol_usable(v))
		return NULL;
	return PyUnicode_FromString(gpunvme_fs_type(v->fs));
}

static PyObject *Volume_uri(Volume *v, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(v->uri ? v->uri : "");
}

/* path -> inode, errors named; called with the lock held and no GIL */
static int vol_lookup(Volume *v, const char *path, uint64_t *ino, struct gpunvme_stat *st, char *err)
{
	int rc = gpunvme_fs_lookup(v->fs, path, ino);
	if (!rc && st)
		rc = gpunvme_fs_stat(v->fs, *ino, st);
	if (rc)
		snprintf(err, LASTERR_LEN, "%s: %s in the %s file system of %s (%s)", path, strerror(-rc),
			 gpunvme_fs_type(v->fs), v->uri, gpunvme_last_error());
	return rc;
}

/* vol_lookup with the GIL released and the volume locked; 0 or raises */
static int vol_lookup_unlocked(Volume *v, const char *path, uint64_t *ino, struct gpunvme_stat *st)
{
	char err[LASTERR_LEN];
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	rc = vol_lookup(v, path, ino, st, err);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc) {
		gnpy_raise_err(rc, "%s", err);
		return -1;
	}
	return 0;
}

static const char *ftype_of(uint32_t mode)
{
	switch (mode & 0170000) {
	case 0100000: return "file";
	case 0040000: return "dir";
	case 0120000: return "symlink";
	default: return "other";
	}
}

static PyObject *vol_stat(Volume *v, const char *path)
{
	if (gnpy_vol_usable(v))
		return NULL;
	uint64_t ino = 0;
	struct gpunvme_stat st;
	if (vol_lookup_unlocked(v, path, &ino, &st))
		return NULL;
	return Py_BuildValue("{s:K,s:I,s:s,s:I,s:I,s:I,s:K,s:K,s:L,s:I}", "ino", (unsigned long long)ino, "mode",
			     st.mode, "type", ftype_of(st.mode), "nlink", st.nlink, "uid", st.uid, "gid", st.gid, "size",
			     (unsigned long long)st.size, "blocks", (unsigned long long)st.blocks, "mtime_sec",
			     (long long)st.mtime_sec, "mtime_nsec", st.mtime_nsec);
}
PATH_METHOD(Volume_stat, vol_stat, "O&")

struct dirlist {
	char **names;
	size_t n, cap;
	int oom;
};

static int dir_cb(void *arg, const char *name, size_t len, uint64_t ino, int ftype)
{
	(void)ino;
	(void)ftype;
	struct dirlist *d = arg;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return 0;
	if (d->n == d->cap) {
		size_t cap = d->cap ? 2 * d->cap : 64;
		char **p = realloc(d->names, cap * sizeof(*p));
		if (!p)
			return d->oom = 1;
		d->names = p;
		d->cap = cap;
	}
	if (!(d->names[d->n] = strndup(name, len)))
		return d->oom = 1;
	d->n++;
	return 0;
}

static PyObject *vol_listdir(Volume *v, const char *path)
{
	if (gnpy_vol_usable(v))
		return NULL;
	struct dirlist d = { 0 };
	char err[LASTERR_LEN];
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	uint64_t ino;
	struct gpunvme_stat st;
	rc = vol_lookup(v, path, &ino, &st, err);
	if (!rc && (st.mode & 0170000) != 0040000) {
		rc = -ENOTDIR;
		snprintf(err, LASTERR_LEN, "%s: not a directory", path);
	}
	if (!rc && (rc = gpunvme_fs_readdir(v->fs, ino, dir_cb, &d)) < 0)
		snprintf(err, LASTERR_LEN, "%s: %s", path, gpunvme_last_error());
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	PyObject *list = NULL;
	if (d.oom)
		PyErr_NoMemory();
	else if (rc < 0)
		gnpy_raise_err(rc, "%s", err);
	else if ((list = PyList_New(0)))
		for (size_t i = 0; i < d.n; i++) {
			PyObject *s = PyUnicode_DecodeUTF8(d.names[i], (Py_ssize_t)strlen(d.names[i]), "surrogateescape");
			if (!s || PyList_Append(list, s)) {
				Py_XDECREF(s);
				Py_CLEAR(list);
				break;
			}
			Py_DECREF(s);
		}
	for (size_t i = 0; i < d.n; i++)
		free(d.names[i]);
	free(d.names);
	return list;
}
PATH_METHOD(Volume_listdir, vol_listdir, "|O&")

/* An int argument of read() (absent: *out unchanged). Out of range is
 * gpunvme.Error naming the argument, not a bare OverflowError or, worse, a
 * silently different read: a negative offset used to give b'' and a size
 * of -2 the whole file. */
static int read_arg(PyObject *o, const char *name, long long min, const char *want, long long *out)
{
	if (!o)
		return 0;
	PyObject *i = PyNumber_Index(o); /* a float or str stays a TypeError */
	if (!i)
		return -1;
	int ovf = 0;
	long long x = PyLong_AsLongLongAndOverflow(i, &ovf);
	PyObject *txt = ovf ? NULL : PyObject_Str(i);
	Py_DECREF(i);
	if (x == -1 && PyErr_Occurred()) {
		Py_XDECREF(txt);
		return -1;
	}
	if (ovf > 0) {
		gnpy_raise_err(ERANGE, "read(): %s is past 2**63-1, larger than any file: expected %s", name, want);
		return -1;
	}
	if (ovf < 0 || x < min) {
		const char *t = txt ? PyUnicode_AsUTF8(txt) : NULL;
		gnpy_raise_err(EINVAL, "read(): %s=%s: expected %s", name, t ? t : "(a large negative number)", want);
		Py_XDECREF(txt);
		return -1;
	}
	Py_XDECREF(txt);
	*out = x;
	return 0;
}

/* read(path, offset=0, size=-1) -> bytes: a small file (an index json, a
 * config) through the file system decoder; size -1: to the end */
static PyObject *vol_read(Volume *v, const char *path, PyObject *offo, PyObject *sizeo)
{
	long long offs = 0, size = -1;
	if (read_arg(offo, "offset", 0, "a byte offset >= 0", &offs) ||
	    read_arg(sizeo, "size", -1, "a byte count >= 0, or -1 for the rest of the file", &size) || gnpy_vol_usable(v))
		return NULL;
	uint64_t off = (uint64_t)offs;
	char err[LASTERR_LEN];
	uint64_t ino;
	struct gpunvme_stat st;
	if (vol_lookup_unlocked(v, path, &ino, &st))
		return NULL;
	if ((st.mode & 0170000) != 0100000)
		return gnpy_raise_err(EISDIR, "%s: not a regular file", path);
	uint64_t avail = off < st.size ? st.size - off : 0;
	uint64_t n = size < 0 || (uint64_t)size > avail ? avail : (uint64_t)size;
	if (n > (1ull << 30))
		return gnpy_raise_err(EFBIG, "%s: read of %" PRIu64 " bytes refused (1 GiB at most: load tensors instead)", path, n);
	PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (!b)
		return NULL;
	char *p = PyBytes_AS_STRING(b);
	int64_t got;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	got = gpunvme_fs_pread(v->fs, ino, p, n, off);
	if (got < 0)
		gnpy_save_err(err);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (got < 0) {
		Py_DECREF(b);
		return gnpy_raise_err((int)got, "%s: %s", path, err);
	}
	if ((uint64_t)got != n)
		_PyBytes_Resize(&b, (Py_ssize_t)got);
	return b;
}

static PyObject *Volume_read(Volume *v, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "path", "offset", "size", NULL };
	PyObject *pb = NULL, *offo = NULL, *sizeo = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OO", kwlist, gnpy_path_conv, &pb, &offo, &sizeo))
		return NULL;
	PyObject *r = vol_read(v, PyBytes_AS_STRING(pb), offo, sizeo);
	Py_DECREF(pb);
	return r;
}

/* tier_choose(tier) -> tier: the library's one tier policy (tier.h) for
 * this volume's controllers (an md array's members together), asked for a
 * GPU device: -1 (auto) becomes 2 or 1 by their capabilities; an explicit
 * tier they cannot do raises Error(EOPNOTSUPP) naming the tier to use. */
static PyObject *Volume_tier_choose(Volume *v, PyObject *args)
{
	int tier;
	if (!PyArg_ParseTuple(args, "i", &tier))
		return NULL;
	if (gnpy_vol_usable(v))
		return NULL;
	char err[LASTERR_LEN];
	enum gpunvme_tier t = GPUNVME_TIER_CPU;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	struct gpunvme_ctrl *const *cs = v->md ? v->md->c : &v->c;
	size_t n = v->md ? v->md->n : 1;
	/* a GPU device was asked for: Python checked the build has CUDA */
	rc = gpunvme_tier_choose(cs, n, true, (enum gpunvme_tier)tier, &t);
	if (rc)
		snprintf(err, LASTERR_LEN, "%s: %s", v->uri ? v->uri : "?", gpunvme_last_error());
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc)
		return gnpy_raise_err(rc, "%s", err);
	return PyLong_FromLong((long)t);
}

/* open_model(path) -> Model (_gpunvme_model.c) */
PATH_METHOD(Volume_open_model, gnpy_model_open, "O&")

static PyObject *Volume_enter(Volume *v, PyObject *unused)
{
	(void)unused;
	Py_INCREF(v);
	return (PyObject *)v;
}

static PyObject *Volume_exit(Volume *v, PyObject *args)
{
	(void)args;
	return Volume_close(v, NULL);
}

/* ---- the type -------------------------------------------------------------------- */

static PyMethodDef Volume_methods[] = {
	{ "close", (PyCFunction)Volume_close, METH_NOARGS, "Stop using the volume; the controller is shut down "
							    "when the last tensor loaded from it is gone." },
	{ "stat", (PyCFunction)Volume_stat, METH_VARARGS, "stat(path) -> dict" },
	{ "listdir", (PyCFunction)Volume_listdir, METH_VARARGS, "listdir(path='/') -> [name] (no '.' and '..')" },
	{ "read", (PyCFunction)(void (*)(void))Volume_read, METH_VARARGS | METH_KEYWORDS,
	  "read(path, offset=0, size=-1) -> bytes (at most 1 GiB; size -1: to the end of the file)" },
	{ "open_model", (PyCFunction)Volume_open_model, METH_VARARGS, "open_model(path) -> Model" },
	{ "tier_choose", (PyCFunction)Volume_tier_choose, METH_VARARGS,
	  "tier_choose(tier) -> tier: the tier policy for a GPU device (-1: auto -> 2 or 1 by the controllers' "
	  "capabilities); an explicit tier they cannot do raises gpunvme.Error naming the one to use" },
	{ "__enter__", (PyCFunction)Volume_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)Volume_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Volume_getset[] = {
	{ "closed", (getter)Volume_closed, NULL, NULL, NULL },
	{ "_parked", (getter)Volume_parked, NULL,
	  "(tier, device, queues, depth, serial) of the loader kept for the next Loader, or None", NULL },
	{ "fs_type", (getter)Volume_fs_type, NULL, "\"ext4\" or \"xfs\"", NULL },
	{ "uri", (getter)Volume_uri, NULL, NULL, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject gnpy_VolumeType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Volume",
	.tp_basicsize = sizeof(Volume),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "Volume(uri, nsid=1, offset=-1, partition=0): a controller, namespace and file system "
		  "(offset -1: found at byte 0 or through the partition table)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Volume_init,
	.tp_dealloc = (destructor)Volume_dealloc,
	.tp_methods = Volume_methods,
	.tp_getset = Volume_getset,
};
