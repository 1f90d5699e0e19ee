/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme: the CPython extension over libgpunvme. It holds the C
 * objects and hands tensor memory out through DLPack; gpunvme/__init__.py
 * turns that into numpy/torch tensors of the right dtype and shape.
 *
 * Object graph (each arrow is a strong reference):
 *
 *   capsule / DLManagedTensor -> Buffers -> Loader -> Model -> Volume
 *   Tensor (exporter)         -> Buffers
 *
 * Volume: controller + namespace block device + file system.
 * Model:  one model file's index and extents (or a model set's).
 * Loader: a gpunvme_layer_loader on one tier / GPU.
 * Buffers: a selection of tensors placed in loader memory, and loaded.
 * Stream: a layer stream (its own loader, K slots, resident tensors); its
 *         memory goes with the last reference (views of a slot show the
 *         slot's current layer: valid from acquire to release).
 *
 * Memory a consumer (numpy, torch) sees stays valid while any tensor over
 * it lives: the DLPack deleter drops the Buffers reference, and everything
 * down the chain goes with the last one. Volume.close() only stops new use;
 * the controller is shut down when the last Model of the volume is gone.
 *
 * Locking: the controller's file system reader and a loader's queue pairs
 * belong to one thread at a time, so every library call on a volume runs
 * under the volume's mutex. Long calls release the GIL first; nothing takes
 * the GIL while holding the mutex (progress callbacks run between chunks,
 * with the mutex released), so deallocators may take the mutex with the GIL
 * held without deadlocking.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/extents.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/md.h"
#include "gpunvme/volume.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"
#include "gpunvme/modelset.h"
#include "gpunvme/part.h"
#include "gpunvme/stream.h"
#include "gpunvme/tier.h"

#ifdef GPUNVME_PY_CUDA
#include <cuda_runtime_api.h>
#include "gpunvme/gpu.h"
#endif

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

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };
enum { kDLUInt = 1 };

/* ---- errors -------------------------------------------------------------------- */

static PyObject *Error; /* gpunvme.Error(OSError): errno, strerror = the library's message */

static PyObject *raise_err(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static PyObject *raise_err(int rc, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* a path from the file system may be any bytes: shown as \xHH (as the
	 * CLI shows it) rather than failing to build the error */
	PyObject *args = Py_BuildValue("(iN)", rc < 0 ? -rc : rc,
				       PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "backslashreplace"));
	if (args) {
		PyErr_SetObject(Error, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* The thread's last library message, copied before the GIL is taken back
 * (it is per thread, and another library call could overwrite it). */
#define LASTERR_LEN 1024
static void save_err(char *buf)
{
	snprintf(buf, LASTERR_LEN, "%s", gpunvme_last_error());
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

/* ---- paths ----------------------------------------------------------------------- */

/*
 * A path inside a volume: str, bytes or os.PathLike -> bytes (the caller
 * drops the reference). str is encoded as os.fsencode() does, with
 * surrogateescape, because listdir() decodes names that way: a non-UTF-8
 * name it gave back as 'caf\udce9' must find the same file again.
 */
static int path_conv(PyObject *o, void *out)
{
	if (!o) /* PyArg_Parse* cleaning up after a later argument failed */
		return PyUnicode_FSConverter(NULL, out);
	int r = PyUnicode_FSConverter(o, out);
	if (!r && PyErr_ExceptionMatches(PyExc_ValueError)) {
		/* a bad value, not a bad type: gpunvme.Error like every other one */
		PyErr_Clear();
		raise_err(EINVAL, "a path holds a NUL byte, which no file name can: remove it");
	}
	return r;
}

/* The Python entry points below parse the path with path_conv and call
 * these with its bytes, so every exit drops the bytes object in one place. */
#define PATH_METHOD(name, impl, fmt_default)                                            \
	static PyObject *name(Volume *v, PyObject *args)                                \
	{                                                                               \
		PyObject *pb = NULL;                                                    \
		if (!PyArg_ParseTuple(args, fmt_default, path_conv, &pb))              \
			return NULL;                                                    \
		PyObject *r = impl(v, pb ? PyBytes_AS_STRING(pb) : "/");               \
		Py_XDECREF(pb);                                                         \
		return r;                                                               \
	}

/* ---- Volume -------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	struct gpunvme_volume *vol; /* gpunvme_volume_open: the parts below are its */
	struct gpunvme_ctrl *c;
	struct gpunvme_fs *fs;
	pthread_mutex_t lock;
	bool lock_init;
	bool closed;         /* close() was called: no new use */
	Py_ssize_t nchild;   /* Model objects alive */
	uint32_t nsid;
	char *uri;
	struct gpunvme_md_volume *md; /* an md array ("md:URI;URI..."): c is member 0's */
} Volume;

static PyTypeObject VolumeType;

static void vol_release(Volume *v)
{
	gpunvme_volume_close(v->vol); /* an array's readers and controllers too */
	v->vol = NULL;
	v->md = NULL;
	v->fs = NULL;
	v->c = NULL;
}

static int vol_usable(Volume *v)
{
	if (v->closed || !v->fs) {
		raise_err(EBADF, "the gpunvme.Volume (%s) is closed: open a new one", v->uri ? v->uri : "?");
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
		raise_err(EINVAL, "Volume.__init__ called twice");
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
		save_err(err);
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
	raise_err(rc == -ERANGE ? -EINVAL : rc, "%s: %s", uri, err);
	return -1;
}

static void Volume_dealloc(Volume *v)
{
	vol_release(v);
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
	 * the last Model (Model_dealloc) */
	if (!v->nchild) {
		pthread_mutex_lock(&v->lock);
		vol_release(v);
		pthread_mutex_unlock(&v->lock);
	}
	Py_RETURN_NONE;
}

static PyObject *Volume_closed(Volume *v, void *unused)
{
	(void)unused;
	return PyBool_FromLong(v->closed);
}

static PyObject *Volume_fs_type(Volume *v, void *unused)
{
	(void)unused;
	if (vol_usable(v))
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
	if (vol_usable(v))
		return NULL;
	uint64_t ino = 0;
	struct gpunvme_stat st;
	char err[LASTERR_LEN];
	int rc;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	rc = vol_lookup(v, path, &ino, &st, err);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc)
		return raise_err(rc, "%s", err);
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
	if (vol_usable(v))
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
		raise_err(rc, "%s", err);
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
		raise_err(ERANGE, "read(): %s is past 2**63-1, larger than any file: expected %s", name, want);
		return -1;
	}
	if (ovf < 0 || x < min) {
		const char *t = txt ? PyUnicode_AsUTF8(txt) : NULL;
		raise_err(EINVAL, "read(): %s=%s: expected %s", name, t ? t : "(a large negative number)", want);
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
	    read_arg(sizeo, "size", -1, "a byte count >= 0, or -1 for the rest of the file", &size) || vol_usable(v))
		return NULL;
	uint64_t off = (uint64_t)offs;
	char err[LASTERR_LEN];
	int rc;
	uint64_t ino;
	struct gpunvme_stat st;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	rc = vol_lookup(v, path, &ino, &st, err);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc)
		return raise_err(rc, "%s", err);
	if ((st.mode & 0170000) != 0100000)
		return raise_err(EISDIR, "%s: not a regular file", path);
	uint64_t avail = off < st.size ? st.size - off : 0;
	uint64_t n = size < 0 || (uint64_t)size > avail ? avail : (uint64_t)size;
	if (n > (1ull << 30))
		return raise_err(EFBIG, "%s: read of %" PRIu64 " bytes refused (1 GiB at most: load tensors instead)", path, n);
	PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
	if (!b)
		return NULL;
	char *p = PyBytes_AS_STRING(b);
	int64_t got;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	got = gpunvme_fs_pread(v->fs, ino, p, n, off);
	if (got < 0)
		save_err(err);
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (got < 0) {
		Py_DECREF(b);
		return raise_err((int)got, "%s: %s", path, err);
	}
	if ((uint64_t)got != n)
		_PyBytes_Resize(&b, (Py_ssize_t)got);
	return b;
}

static PyObject *Volume_read(Volume *v, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "path", "offset", "size", NULL };
	PyObject *pb = NULL, *offo = NULL, *sizeo = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|OO", kwlist, path_conv, &pb, &offo, &sizeo))
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
	if (vol_usable(v))
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
		return raise_err(rc, "%s", err);
	return PyLong_FromLong((long)t);
}

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

/* ---- Model --------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	Volume *vol;
	struct gpunvme_model_set *set; /* owns everything below */
	struct gpunvme_model *m;      /* every tensor of every file of the set */
	struct gpunvme_extent *ext;   /* the set's address space */
	size_t n_ext;
	uint64_t size;                /* bytes of the file (or set's address space) */
	char *path;
} Model;

static PyTypeObject ModelType;

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

static PyObject *vol_open_model(Volume *v, const char *path)
{
	if (vol_usable(v))
		return NULL;
	Model *mo = PyObject_New(Model, &ModelType);
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
	mo->vol = v;
	v->nchild++;
	if (rc) {
		Py_DECREF(mo);
		return raise_err(rc, "%s", err);
	}
	return (PyObject *)mo;
}
PATH_METHOD(Volume_open_model, vol_open_model, "O&")

static void Model_dealloc(Model *mo)
{
	gpunvme_model_set_free(mo->set);
	free(mo->path);
	Volume *v = mo->vol;
	if (v) {
		if (--v->nchild == 0 && v->closed) {
			pthread_mutex_lock(&v->lock);
			vol_release(v);
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

/* ---- Loader -------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	Model *model;
	struct gpunvme_layer_loader *l;
	int tier;
	int device;        /* CUDA device of the GPU tiers */
} Loader;

static PyTypeObject LoaderType;

static pthread_mutex_t *loader_lock(Loader *ld)
{
	return &ld->model->vol->lock;
}

/* Loader(model, tier, device=0, queues=0, depth=0): 0 = fit to the
 * controller (gpunvme_loader_opts) */
static PyObject *Loader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "model", "tier", "device", "queues", "depth", NULL };
	Model *mo;
	int tier, device = 0;
	unsigned int queues = 0, depth = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!i|iII", kwlist, &ModelType, &mo, &tier, &device, &queues,
					 &depth))
		return NULL;
	if (tier < GPUNVME_TIER_AUTO || tier > 2)
		return raise_err(EINVAL, "tier %d: expected -1 (auto: the tier policy), 0 (CPU), 1 (pinned host memory) "
				 "or 2 (GPU memory)", tier);
	if (vol_usable(mo->vol))
		return NULL;
#ifndef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU)
		return raise_err(ENOTSUP,
				 "this gpunvme extension was built without CUDA: rebuild it on a machine with nvcc with "
				 "GPUNVME_CUDA=ON pip install --no-build-isolation ./python (or use device=\"cpu\")");
#endif
	Loader *ld = (Loader *)type->tp_alloc(type, 0);
	if (!ld)
		return NULL;
	Py_INCREF(mo);
	ld->model = mo;
	ld->tier = tier;
	ld->device = device;
	Volume *v = mo->vol;
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = (enum gpunvme_tier)tier;
	o.queues = queues;
	o.depth = depth;
#ifdef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU) {
		o.gpu = gpunvme_loader_gpu_backend();
		rc = set_device(device, err);
	}
#endif
	if (!rc) {
		/* an array: one loader per member, each on its own controller */
		rc = gpunvme_layer_loader_init_volume(v->vol, mo->ext, mo->n_ext, mo->size, &o, &ld->l);
		if (rc)
			snprintf(err, LASTERR_LEN, "%s: layer loader (tier %d): %s", mo->path, tier, gpunvme_last_error());
		/* the CPU tier takes its queues again at its next load: idle
		 * loaders (a safe_open between reads) leave them to others */
		else if ((ld->tier = (int)gpunvme_layer_loader_tier(ld->l)) == GPUNVME_TIER_CPU)
			gpunvme_layer_loader_release_queues(ld->l);
	}
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(ld);
		return raise_err(rc, "%s", err);
	}
	return (PyObject *)ld;
}

static void Loader_dealloc(Loader *ld)
{
	if (ld->l) {
		pthread_mutex_t *lk = loader_lock(ld);
		pthread_mutex_lock(lk);
#ifdef GPUNVME_PY_CUDA
		char err[LASTERR_LEN];
		if (ld->tier != GPUNVME_TIER_CPU)
			set_device(ld->device, err);
#endif
		gpunvme_layer_loader_destroy(ld->l);
		pthread_mutex_unlock(lk);
	}
	Py_XDECREF(ld->model);
	Py_TYPE(ld)->tp_free((PyObject *)ld);
}

/* ---- Buffers ------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	Loader *loader;
	struct gpunvme_model_buffers *b;
	bool loaded;
	/* select_bytes: a one-tensor index of the part asked for, which b's
	 * tensor pointer points into (freed after b) */
	struct gpunvme_model *part;
} Buffers;

static PyTypeObject BuffersType;

static void Buffers_dealloc(Buffers *bu)
{
	if (bu->b) {
		Loader *ld = bu->loader;
		pthread_mutex_t *lk = loader_lock(ld);
		pthread_mutex_lock(lk);
#ifdef GPUNVME_PY_CUDA
		char err[LASTERR_LEN];
		if (ld->tier != GPUNVME_TIER_CPU)
			set_device(ld->device, err);
#endif
		gpunvme_model_buffers_free(ld->l, bu->b);
		pthread_mutex_unlock(lk);
	}
	gpunvme_model_free(bu->part);
	Py_XDECREF(bu->loader);
	Py_TYPE(bu)->tp_free((PyObject *)bu);
}

/* Buffers for tensors idx[0..n) of model m (the loader's own index, or
 * `part`, a one-tensor index the Buffers then owns and frees), placed in
 * loader memory; nothing read yet. */
static PyObject *buffers_place(Loader *ld, const struct gpunvme_model *m, struct gpunvme_model *part,
			       const size_t *idx, size_t n)
{
	if (vol_usable(ld->model->vol)) {
		gpunvme_model_free(part);
		return NULL;
	}
	Buffers *bu = PyObject_New(Buffers, &BuffersType);
	if (!bu) {
		gpunvme_model_free(part);
		return NULL;
	}
	Py_INCREF(ld);
	bu->loader = ld;
	bu->b = NULL;
	bu->loaded = false;
	bu->part = part;
	char err[LASTERR_LEN];
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(loader_lock(ld));
#ifdef GPUNVME_PY_CUDA
	if (ld->tier != GPUNVME_TIER_CPU)
		rc = set_device(ld->device, err);
#endif
	if (!rc && (rc = gpunvme_model_buffers_alloc_sel(ld->l, m, idx, n, &bu->b)))
		snprintf(err, LASTERR_LEN, "%s: %s", ld->model->path, gpunvme_last_error());
	pthread_mutex_unlock(loader_lock(ld));
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(bu);
		return raise_err(rc, "%s", err);
	}
	return (PyObject *)bu;
}

/* Loader.select(indices) -> Buffers: the tensors model.tensors()[i] for i in
 * indices, in that order, placed in loader memory (nothing read yet) */
static PyObject *Loader_select(Loader *ld, PyObject *args)
{
	PyObject *seq;
	if (!PyArg_ParseTuple(args, "O", &seq))
		return NULL;
	PyObject *fast = PySequence_Fast(seq, "select() takes a sequence of tensor indices");
	if (!fast)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
	size_t *idx = malloc(((size_t)n + 1) * sizeof(*idx));
	if (!idx) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		size_t k = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(fast, i));
		if (k == (size_t)-1 && PyErr_Occurred()) {
			free(idx);
			Py_DECREF(fast);
			return NULL;
		}
		idx[i] = k;
	}
	Py_DECREF(fast);
	PyObject *bu = buffers_place(ld, ld->model->m, NULL, idx, (size_t)n);
	free(idx);
	return bu;
}

/* Loader.select_bytes(index, start, length) -> Buffers: bytes [start,
 * start + length) of tensor model.tensors()[index] alone, placed in loader
 * memory (nothing read yet): a slice of rows reads only those rows. The
 * part is a one-tensor index of its own, so the library places and loads
 * it like any tensor (offset in the file moved by start). */
static PyObject *Loader_select_bytes(Loader *ld, PyObject *args)
{
	Py_ssize_t k;
	unsigned long long start, len;
	if (!PyArg_ParseTuple(args, "nKK", &k, &start, &len))
		return NULL;
	const struct gpunvme_model *m = ld->model->m;
	if (k < 0 || (size_t)k >= m->n_tensors)
		return raise_err(ERANGE, "select_bytes: tensor index %zd out of range (%zu tensors)", k, m->n_tensors);
	const struct gpunvme_tensor *t = &m->tensors[k];
	if (!len || start > t->bytes || len > t->bytes - start)
		return raise_err(EINVAL, "select_bytes: bytes [%llu, +%llu) are not inside tensor \"%s\" (%llu bytes)",
				 start, len, t->name, (unsigned long long)t->bytes);
	struct gpunvme_model *part = calloc(1, sizeof(*part));
	if (!part || !(part->tensors = calloc(1, sizeof(*part->tensors)))) {
		free(part);
		return PyErr_NoMemory();
	}
	part->format = m->format;
	part->file_size = m->file_size;
	part->n_tensors = 1;
	struct gpunvme_tensor *pt = &part->tensors[0];
	*pt = *t;
	pt->offset += start;
	pt->bytes = len;
	pt->ndim = 1;
	pt->shape[0] = len;
	if (!(pt->name = strdup(t->name))) {
		gpunvme_model_free(part);
		return PyErr_NoMemory();
	}
	size_t zero = 0;
	return buffers_place(ld, part, part, &zero, 1);
}

/*
 * A load runs in steps with the GIL taken back between them, so that Ctrl-C
 * (PyErr_CheckSignals) and the progress callback get a turn: one call for
 * the whole load made KeyboardInterrupt wait for its end (2 s into a 2 s
 * load). A step is sized from the rate the steps so far read at to take
 * about LOAD_STEP_NS, between LOAD_STEP_MIN and LOAD_STEP_MAX bytes, at most
 * 8 times the last: small enough to stop promptly on a slow device, large
 * enough that the few ms each step costs (the queues drain, the GPU tiers
 * wait once per step) stay a few percent on a fast one. Doubling from
 * 8 MiB cost Tier 2 a quarter of a 512 MiB load's speed (7 steps).
 */
#define LOAD_STEP_MIN (8ull << 20)
#define LOAD_STEP_MAX (1ull << 30)
#define LOAD_STEP_NS 200000000ull

struct load_pos {
	size_t k;   /* run */
	uint64_t o; /* bytes of run k done */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One locked, GIL-free step: about `budget` bytes from *p on, across runs;
 * *got: bytes read. The GPU tiers queue the pieces and wait once, so the
 * runs of one step overlap as in gpunvme_model_load. */
static int load_step(Loader *ld, struct gpunvme_model_buffers *b, struct load_pos *p, uint64_t budget, uint64_t *got,
		     char *err)
{
	int rc = 0;
	uint16_t status = 0;
	const bool gpu = ld->tier != GPUNVME_TIER_CPU;
	bool queued = false, again = false;
	const struct load_pos start = *p;
	*got = 0;
	pthread_mutex_lock(loader_lock(ld));
#ifdef GPUNVME_PY_CUDA
	if (gpu)
		rc = set_device(ld->device, err);
#endif
redo:
	while (!rc && p->k < b->n_runs && *got < budget) {
		const struct gpunvme_model_run *r = &b->runs[p->k];
		uint64_t n = r->len - p->o;
		if (n > budget - *got) {
			n = budget - *got;
			/* end at a 4 KiB file offset: the next step starts on a block
			 * boundary, so no block is read twice through the bounce buffer */
			if (n > 4096)
				n -= (r->off + p->o + n) % 4096;
		}
		if (n) {
			rc = gpu && !again ? gpunvme_load_layer_async(ld->l, r->off + p->o, n, r->dst + p->o, NULL, NULL)
					   : gpunvme_load_layer(ld->l, r->off + p->o, n, r->dst + p->o, &status);
			queued |= gpu && !again && !rc;
		}
		*got += n;
		if ((p->o += n) == r->len) {
			p->k++;
			p->o = 0;
		}
	}
	if (rc)
		snprintf(err, LASTERR_LEN, "%s: loading: %s", ld->model->path, gpunvme_last_error());
	/* wait for what was queued (also after a failure: the memory may be
	 * freed next) and collect the reads' result */
	if (queued) {
		queued = false;
		int rc2 = gpunvme_layer_loader_wait(ld->l, &status);
		if (!rc && (rc2 == -ETIMEDOUT || rc2 == -EIO)) {
			/* which queued piece failed is not known: the step's
			 * pieces again, one synchronous load each (with the
			 * loader's retries; the wait recovered the queues) */
			*p = start;
			*got = 0;
			again = true;
			goto redo;
		}
		if (rc2 && !rc) {
			rc = rc2;
			snprintf(err, LASTERR_LEN, "%s: loading: %s", ld->model->path, gpunvme_last_error());
		}
	}
	pthread_mutex_unlock(loader_lock(ld));
	return rc;
}

/* The end of a load, however it ended: the CPU tier gives its queue pairs
 * back for other loaders (the GPU tiers keep theirs for the loader's life).
 * Not after every step: creating them again each time took more than half
 * of a fast load's time. */
static void load_end(Loader *ld)
{
	if (ld->tier != GPUNVME_TIER_CPU)
		return;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(loader_lock(ld));
	gpunvme_layer_loader_release_queues(ld->l);
	pthread_mutex_unlock(loader_lock(ld));
	Py_END_ALLOW_THREADS
}

/* Buffers.load(progress=None): read every run; progress(done, total) is
 * called after each step (bytes the runs read). Ctrl-C stops the load at
 * the end of the step it arrives in: KeyboardInterrupt, the Buffers stay
 * unloaded (no Tensor can be made of them) */
static PyObject *Buffers_load(Buffers *bu, PyObject *args)
{
	PyObject *cb = Py_None;
	if (!PyArg_ParseTuple(args, "|O", &cb))
		return NULL;
	Loader *ld = bu->loader;
	if (vol_usable(ld->model->vol))
		return NULL;
	char err[LASTERR_LEN];
	int rc = 0;
	struct load_pos p = { 0, 0 };
	uint64_t done = 0, all = bu->b->run_bytes, budget = LOAD_STEP_MIN;
	bu->loaded = false;
	while (p.k < bu->b->n_runs) {
		uint64_t got = 0, t0 = now_ns();
		Py_BEGIN_ALLOW_THREADS
		rc = load_step(ld, bu->b, &p, budget, &got, err);
		Py_END_ALLOW_THREADS
		if (rc) {
			load_end(ld);
			return raise_err(rc, "%s", err);
		}
		uint64_t dt = now_ns() - t0;
		done += got;
		if (cb != Py_None) {
			PyObject *res = PyObject_CallFunction(cb, "KK", (unsigned long long)done, (unsigned long long)all);
			if (!res) {
				load_end(ld);
				return NULL;
			}
			Py_DECREF(res);
		}
		if (PyErr_CheckSignals()) {
			load_end(ld);
			return NULL;
		}
		/* bytes per LOAD_STEP_NS at this step's rate (in doubles: no
		 * overflow, and a zero time is the largest step) */
		double next = dt ? (double)got * (double)LOAD_STEP_NS / (double)dt : (double)LOAD_STEP_MAX;
		if (next > 8.0 * (double)budget)
			next = 8.0 * (double)budget;
		budget = next > (double)LOAD_STEP_MAX ? LOAD_STEP_MAX
			 : next < (double)LOAD_STEP_MIN ? LOAD_STEP_MIN : (uint64_t)next;
	}
	load_end(ld);
	bu->loaded = true;
	Py_RETURN_NONE;
}

static PyObject *Buffers_run_bytes(Buffers *bu, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(bu->b->run_bytes);
}

static PyObject *Buffers_n_runs(Buffers *bu, void *unused)
{
	(void)unused;
	return PyLong_FromSize_t(bu->b->n_runs);
}

/* ---- Tensor: a DLPack exporter over one selected tensor's bytes ------------------ */

typedef struct {
	PyObject_HEAD
	Buffers *owner;
	size_t k;
} Tensor;

static PyTypeObject TensorType;

static char zero_byte; /* data pointer of zero-size host tensors: never NULL */

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

static PyObject *Tensor_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffers", "index", NULL };
	Buffers *bu;
	Py_ssize_t k;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!n", kwlist, &BuffersType, &bu, &k))
		return NULL;
	if (k < 0 || (size_t)k >= bu->b->n_tensors)
		return raise_err(EINVAL, "tensor index %zd out of range (%zu selected)", k, bu->b->n_tensors);
	if (!bu->loaded)
		return raise_err(EINVAL, "the tensors are not loaded yet: call load() first");
	Tensor *t = (Tensor *)type->tp_alloc(type, 0);
	if (!t)
		return NULL;
	Py_INCREF(bu);
	t->owner = bu;
	t->k = (size_t)k;
	return (PyObject *)t;
}

static void Tensor_dealloc(Tensor *t)
{
	Py_XDECREF(t->owner);
	Py_TYPE(t)->tp_free((PyObject *)t);
}

static void tensor_device(Tensor *t, int32_t *type, int32_t *id)
{
	Loader *ld = t->owner->loader;
	/* Tier 1 is host memory (pinned, mapped for the GPU): CPU tensors */
	*type = ld->tier == GPUNVME_TIER_2 ? kDLCUDA : kDLCPU;
	*id = ld->tier == GPUNVME_TIER_2 ? ld->device : 0;
}

/* __dlpack__(stream=None, max_version=None, dl_device=None, copy=None):
 * the tensor's bytes as a 1-D uint8 DLPack tensor (legacy capsule); the
 * Python layer views it as the real dtype and shape. The data is complete
 * when this is called (the load waited), so any stream may use it. */
/* __dlpack__ of nbytes of uint8 at p on (dt, id), kept alive by owner:
 * the one capsule builder for tensors and views. */
static PyObject *dl_export(PyObject *args, PyObject *kw, void *p, uint64_t nbytes, int32_t dt, int32_t id,
			   PyObject *owner)
{
	static char *kwlist[] = { "stream", "max_version", "dl_device", "copy", NULL };
	PyObject *stream = Py_None, *maxv = Py_None, *dl_device = Py_None, *copy = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO", kwlist, &stream, &maxv, &dl_device, &copy))
		return NULL;
	if (copy == Py_True)
		return raise_err(ENOTSUP, "__dlpack__(copy=True): gpunvme tensors are exported without a copy");
	struct dl_holder *h = calloc(1, sizeof(*h));
	if (!h)
		return PyErr_NoMemory();
	if (!p && dt == kDLCPU)
		p = &zero_byte;
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

static PyObject *Tensor_dlpack(Tensor *t, PyObject *args, PyObject *kw)
{
	int32_t dt, id;
	tensor_device(t, &dt, &id);
	return dl_export(args, kw, t->owner->b->ptr[t->k], t->owner->b->tensors[t->k]->bytes, dt, id,
			 (PyObject *)t->owner);
}

static PyObject *Tensor_dlpack_device(Tensor *t, PyObject *unused)
{
	(void)unused;
	int32_t dt, id;
	tensor_device(t, &dt, &id);
	return Py_BuildValue("(ii)", dt, id);
}

static PyObject *Tensor_nbytes(Tensor *t, void *unused)
{
	(void)unused;
	return PyLong_FromUnsignedLongLong(t->owner->b->tensors[t->k]->bytes);
}

static PyObject *Tensor_data_ptr(Tensor *t, void *unused)
{
	(void)unused;
	return PyLong_FromVoidPtr(t->owner->b->ptr[t->k]);
}

/* ---- Stream: a layer stream (gpunvme/stream.h) -------------------------------------- */

typedef struct {
	PyObject_HEAD
	Model *model;
	struct gpunvme_layer_stream *s;
	int tier;          /* in use (after a Tier 2 -> 1 fallback) */
	int device;
} Stream;

static PyTypeObject StreamType;

/* View: a DLPack exporter of bytes inside a stream's memory (a slot or the
 * resident tensors). Holds the Stream, so the memory outlives every view;
 * a slot's bytes are those of the layer until it is released. */
typedef struct {
	PyObject_HEAD
	Stream *owner;
	void *p;
	uint64_t nbytes;
} View;

static PyTypeObject ViewType;

static pthread_mutex_t *stream_lock(Stream *st)
{
	return &st->model->vol->lock;
}

/* A stream keeps its controller (through its Model) after Volume.close():
 * it was opened while the volume was, and reads only its own model. */
static int stream_usable(Stream *st)
{
	if (!st->s) {
		raise_err(EBADF, "this layer stream is closed");
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
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!szIi|iIIpp", kwlist, &ModelType, &mo, &layers, &resident,
					 &window, &tier, &device, &queues, &depth, &no_fallback, &sync_reads))
		return NULL;
	if (tier < GPUNVME_TIER_AUTO || tier > 2)
		return raise_err(EINVAL, "tier %d: expected -1 (auto: the tier policy), 0 (CPU), 1 (pinned host memory) "
				 "or 2 (GPU memory)", tier);
	if (vol_usable(mo->vol))
		return NULL;
#ifndef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU)
		return raise_err(ENOTSUP,
				 "this gpunvme extension was built without CUDA: rebuild it on a machine with nvcc with "
				 "GPUNVME_CUDA=ON pip install --no-build-isolation ./python (or use device=\"cpu\")");
#endif
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
#ifdef GPUNVME_PY_CUDA
	if (tier != GPUNVME_TIER_CPU) {
		o.loader.gpu = gpunvme_loader_gpu_backend();
		rc = set_device(device, err);
	}
#endif
	if (!rc) {
		Volume *v = mo->vol;
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
		return raise_err(rc, "%s", err);
	}
	return (PyObject *)st;
}

static void stream_close_locked(Stream *st)
{
#ifdef GPUNVME_PY_CUDA
	char err[LASTERR_LEN];
	if (st->tier != GPUNVME_TIER_CPU)
		set_device(st->device, err);
#endif
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
	View *v = PyObject_New(View, &ViewType);
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
#ifdef GPUNVME_PY_CUDA
	if (st->tier != GPUNVME_TIER_CPU)
		rc = set_device(st->device, err);
#endif
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
		return raise_err(rc, "%s", err);
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
		return raise_err(rc, "%s", err);
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
#ifdef GPUNVME_PY_CUDA
	if (st->tier != GPUNVME_TIER_CPU)
		rc = set_device(st->device, err);
#endif
	if (!rc && (rc = gpunvme_layer_stream_stats(st->s, &ss)))
		snprintf(err, LASTERR_LEN, "%s: %s", st->model->path, gpunvme_last_error());
	pthread_mutex_unlock(stream_lock(st));
	Py_END_ALLOW_THREADS
	if (rc)
		return raise_err(rc, "%s", err);
	return Py_BuildValue("{s:i,s:O,s:I,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:d,s:d}", "tier", (int)ss.tier,
			     "fell_back", ss.fell_back ? Py_True : Py_False, "layers", ss.layers, "window", ss.window,
			     "slot_bytes", (unsigned long long)ss.slot_bytes, "memory_bytes",
			     (unsigned long long)ss.memory_bytes, "bounce_bytes", (unsigned long long)ss.bounce_bytes,
			     "resident_bytes", (unsigned long long)ss.resident_bytes, "layer_loads",
			     (unsigned long long)ss.layer_loads, "bytes_read", (unsigned long long)ss.bytes_read,
			     "acquires", (unsigned long long)ss.acquires, "restarts", (unsigned long long)ss.restarts,
			     "io_ms", ss.io_ms, "stall_ms", ss.stall_ms, "overlap", ss.overlap);
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
	return dl_export(args, kw, v->p ? v->p : &zero_byte, v->nbytes, dt, id, (PyObject *)v->owner);
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

/* ---- type tables ------------------------------------------------------------------- */

/* GPUs the CUDA runtime sees (0 without the CUDA backend) */
static PyObject *mod_cuda_device_count(PyObject *m, PyObject *unused)
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

static PyMethodDef mod_methods[] = {
	{ "cuda_device_count", mod_cuda_device_count, METH_NOARGS, "GPUs the CUDA runtime sees (0 without CUDA)" },
	{ NULL, NULL, 0, NULL },
};

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
	{ "fs_type", (getter)Volume_fs_type, NULL, "\"ext4\" or \"xfs\"", NULL },
	{ "uri", (getter)Volume_uri, NULL, NULL, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject VolumeType = {
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
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject ModelType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Model",
	.tp_basicsize = sizeof(Model),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A model file's tensor index (Volume.open_model)",
	.tp_dealloc = (destructor)Model_dealloc,
	.tp_methods = Model_methods,
	.tp_getset = Model_getset,
};

static PyMethodDef Loader_methods[] = {
	{ "select", (PyCFunction)Loader_select, METH_VARARGS, "select(indices) -> Buffers" },
	{ "select_bytes", (PyCFunction)Loader_select_bytes, METH_VARARGS,
	  "select_bytes(index, start, length) -> Buffers: part of one tensor" },
	{ NULL, NULL, 0, NULL },
};

static PyTypeObject LoaderType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Loader",
	.tp_basicsize = sizeof(Loader),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Loader(model, tier, device=0, queues=0, depth=0)",
	.tp_new = Loader_new,
	.tp_dealloc = (destructor)Loader_dealloc,
	.tp_methods = Loader_methods,
};

static PyMethodDef Buffers_methods[] = {
	{ "load", (PyCFunction)Buffers_load, METH_VARARGS, "load(progress=None)" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Buffers_getset[] = {
	{ "run_bytes", (getter)Buffers_run_bytes, NULL, "bytes the runs read (gaps included)", NULL },
	{ "n_runs", (getter)Buffers_n_runs, NULL, NULL, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject BuffersType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Buffers",
	.tp_basicsize = sizeof(Buffers),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Selected tensors in loader memory (Loader.select)",
	.tp_dealloc = (destructor)Buffers_dealloc,
	.tp_methods = Buffers_methods,
	.tp_getset = Buffers_getset,
};

static PyMethodDef Tensor_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))Tensor_dlpack, METH_VARARGS | METH_KEYWORDS, NULL },
	{ "__dlpack_device__", (PyCFunction)Tensor_dlpack_device, METH_NOARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef Tensor_getset[] = {
	{ "nbytes", (getter)Tensor_nbytes, NULL, NULL, NULL },
	{ "data_ptr", (getter)Tensor_data_ptr, NULL, NULL, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject TensorType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Tensor",
	.tp_basicsize = sizeof(Tensor),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Tensor(buffers, index): DLPack exporter of one loaded tensor's bytes (1-D uint8)",
	.tp_new = Tensor_new,
	.tp_dealloc = (destructor)Tensor_dealloc,
	.tp_methods = Tensor_methods,
	.tp_getset = Tensor_getset,
};

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

static PyTypeObject StreamType = {
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

static PyTypeObject ViewType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.View",
	.tp_basicsize = sizeof(View),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "DLPack exporter of a stream tensor's bytes (1-D uint8)",
	.tp_dealloc = (destructor)View_dealloc,
	.tp_methods = View_methods,
	.tp_getset = View_getset,
};

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT,
	.m_name = "gpunvme._gpunvme",
	.m_doc = "libgpunvme: controllers, file systems, model indexes and loaders (use the gpunvme package)",
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__gpunvme(void)
{
	PyTypeObject *types[] = { &VolumeType, &ModelType, &LoaderType, &BuffersType, &TensorType, &StreamType, &ViewType };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyType_Ready(types[i]) < 0)
			return NULL;
	PyObject *m = PyModule_Create(&moddef);
	if (!m)
		return NULL;
	Error = PyErr_NewExceptionWithDoc("gpunvme.Error",
					  "A gpunvme failure: errno and strerror (the library's message, with the fix).",
					  PyExc_OSError, NULL);
	if (!Error || PyModule_AddObjectRef(m, "Error", Error) < 0)
		goto fail;
	const char *names[] = { "Volume", "Model", "Loader", "Buffers", "Tensor", "Stream", "View" };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0)
			goto fail;
#ifdef GPUNVME_PY_CUDA
	if (PyModule_AddObjectRef(m, "HAVE_CUDA", Py_True) < 0)
		goto fail;
#else
	if (PyModule_AddObjectRef(m, "HAVE_CUDA", Py_False) < 0)
		goto fail;
#endif
	if (PyModule_AddIntConstant(m, "TIER_CPU", GPUNVME_TIER_CPU) || PyModule_AddIntConstant(m, "TIER_1", GPUNVME_TIER_1) ||
	    PyModule_AddIntConstant(m, "TIER_2", GPUNVME_TIER_2))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
