/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme.Loader, Buffers and Tensor: a layer loader on one tier
 * and GPU over a Model; a selection of its tensors placed in loader memory
 * and loaded in steps (Ctrl-C and the progress callback between them); and
 * the DLPack exporter of one loaded tensor's bytes.
 */
#include "_gpunvme.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpunvme/gpunvme.h"
#include "gpunvme/loader.h"
#include "gpunvme/model.h"
#include "gpunvme/tier.h"

/* ---- Loader -------------------------------------------------------------------- */

/* A layer loader and its queues, shared by the Loaders of one volume's
 * files read in turn (Loader(..., share=)): pointed at a Loader's file
 * before each of its loads (gpunvme_layer_loader_retarget), so that
 * load_file of a checkpoint's shards one by one sets up queues once. */
struct loader_core {
	struct gpunvme_layer_loader *l;
	uint64_t target; /* the uid of the Model whose file l reads (volume lock) */
	Py_ssize_t refs; /* Loaders sharing it (GIL) */
	unsigned queues, depth; /* as asked (0: fitted), for share= */
	int tier, device;       /* as made: to take it over, and to destroy it on its device */
	uint64_t serial;        /* its number in the process (Volume._parked) */
};

/* A loader no Loader uses any more (volume lock held) */
static void core_destroy(struct loader_core *k)
{
	if (k->l) {
		char err[LASTERR_LEN];
		gnpy_use_device(k->tier, k->device, err);
		gpunvme_layer_loader_destroy(k->l);
	}
	free(k);
}

/*
 * When the last Loader of a loader goes, the loader is parked on its volume
 * for the next Loader of the same tier, device and queue request: load_file
 * of one shard after another, or of a checkpoint loaded again once the last
 * load's tensors are gone, sets up its queues, bounce buffer and (with the
 * emulator's DMA process) lanes once, not once a call (25 ms a set-up on
 * the H200, bench/results/emu-load-2026-11-28b; load_file per shard
 * 23.4-24.3 GB/s against 22.7-22.8, bench/results/emu-2026-11-28-s16). One
 * loader is parked at most; a Loader that asks for another kind gives it
 * back first, so a parked loader never holds queue pairs that another needs;
 * close() gives it back.
 */
void gnpy_loader_unpark(Volume *v)
{
	struct loader_core *k = v->parked;
	v->parked = NULL;
	if (k)
		core_destroy(k);
}

PyObject *gnpy_loader_parked(Volume *v)
{
	pthread_mutex_lock(&v->lock);
	const struct loader_core *k = v->parked;
	PyObject *r = k ? Py_BuildValue("(iiIIK)", k->tier, k->device, k->queues, k->depth,
						  (unsigned long long)k->serial) : NULL;
	pthread_mutex_unlock(&v->lock);
	if (k)
		return r;
	Py_RETURN_NONE;
}

typedef struct {
	PyObject_HEAD
	Model *model;
	struct loader_core *core;
	int tier;
	int device;        /* CUDA device of the GPU tiers */
	PyObject *weakrefs;
} Loader;

static pthread_mutex_t *loader_lock(Loader *ld)
{
	return &ld->model->vol->lock;
}

/* The shared loader pointed at ld's file (volume lock held) */
static int loader_aim(Loader *ld, char *err)
{
	struct loader_core *k = ld->core;
	if (k->target == ld->model->uid)
		return 0;
	int rc = gpunvme_layer_loader_retarget(k->l, ld->model->ext, ld->model->n_ext, ld->model->size);
	if (rc)
		snprintf(err, LASTERR_LEN, "%s: %s", ld->model->path, gpunvme_last_error());
	else
		k->target = ld->model->uid;
	return rc;
}

/* share=: a Loader whose loader (queues, bounce buffer, memory) this one
 * takes over for its own file, when it asked for the same volume, tier,
 * device and queues; else None (a loader of its own) */
static struct loader_core *shared_core(PyObject *share, const Model *mo, int tier, int device, unsigned queues,
				       unsigned depth)
{
	if (!share || share == Py_None || !PyObject_TypeCheck(share, &gnpy_LoaderType))
		return NULL;
	const Loader *o = (const Loader *)share;
	if (!o->core || o->model->vol != mo->vol || o->device != device || o->core->queues != queues ||
	    o->core->depth != depth || (tier != GPUNVME_TIER_AUTO && tier != o->tier))
		return NULL;
	return o->core;
}

/* Loader(model, tier, device=0, queues=0, depth=0, share=None): 0 = fit to
 * the controller (gpunvme_loader_opts) */
static PyObject *Loader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "model", "tier", "device", "queues", "depth", "share", NULL };
	Model *mo;
	int tier, device = 0;
	unsigned int queues = 0, depth = 0;
	PyObject *share = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!i|iIIO", kwlist, &gnpy_ModelType, &mo, &tier, &device, &queues,
					 &depth, &share))
		return NULL;
	if (tier < GPUNVME_TIER_AUTO || tier > 2)
		return gnpy_raise_err(EINVAL, "tier %d: expected -1 (auto: the tier policy), 0 (CPU), 1 (pinned host memory) "
				      "or 2 (GPU memory)", tier);
	if (share != Py_None && !PyObject_TypeCheck(share, &gnpy_LoaderType))
		return PyErr_Format(PyExc_TypeError, "Loader: share= takes a Loader or None, not %s", Py_TYPE(share)->tp_name);
	if (gnpy_vol_usable(mo->vol))
		return NULL;
	if (gnpy_tier_built(tier))
		return NULL;
	Loader *ld = (Loader *)type->tp_alloc(type, 0);
	if (!ld)
		return NULL;
	Py_INCREF(mo);
	ld->model = mo;
	ld->tier = tier;
	ld->device = device;
	struct loader_core *k = shared_core(share, mo, tier, device, queues, depth);
	if (k) {
		/* pointed at this Loader's file at its first load */
		k->refs++;
		ld->core = k;
		ld->tier = ((Loader *)share)->tier;
		return (PyObject *)ld;
	}
	if (!(k = calloc(1, sizeof(*k)))) {
		Py_DECREF(ld);
		return PyErr_NoMemory();
	}
	static uint64_t serials; /* under the GIL */
	k->refs = 1;
	k->queues = queues;
	k->depth = depth;
	k->target = mo->uid;
	k->device = device;
	k->serial = ++serials;
	ld->core = k;
	Volume *v = mo->vol;
	char err[LASTERR_LEN];
	int rc = 0;
	struct loader_core *p = NULL;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	p = v->parked;
	if (p && p->device == device && p->queues == queues && p->depth == depth &&
	    (tier == GPUNVME_TIER_AUTO || tier == p->tier)) {
		v->parked = NULL; /* taken over: pointed at this file at its first load */
	} else {
		p = NULL;
		gnpy_loader_unpark(v); /* another kind: its queues back first */
	}
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (p) {
		free(k);
		p->refs = 1;
		ld->core = p;
		ld->tier = p->tier;
		return (PyObject *)ld;
	}
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&v->lock);
	struct gpunvme_loader_opts o;
	gpunvme_loader_opts_init(&o);
	o.tier = (enum gpunvme_tier)tier;
	o.queues = queues;
	o.depth = depth;
	rc = gnpy_gpu_prepare(tier, device, &o.gpu, err);
	if (!rc) {
		/* an array: one loader per member, each on its own controller */
		rc = gpunvme_layer_loader_init_volume(v->vol, mo->ext, mo->n_ext, mo->size, &o, &k->l);
		if (rc)
			snprintf(err, LASTERR_LEN, "%s: layer loader (tier %d): %s", mo->path, tier, gpunvme_last_error());
		/* the CPU tier takes its queues again at its next load: idle
		 * loaders (a safe_open between reads) leave them to others */
		else if ((ld->tier = k->tier = (int)gpunvme_layer_loader_tier(k->l)) == GPUNVME_TIER_CPU)
			gpunvme_layer_loader_release_queues(k->l);
	}
	pthread_mutex_unlock(&v->lock);
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(ld);
		return gnpy_raise_err(rc, "%s", err);
	}
	return (PyObject *)ld;
}

static void Loader_dealloc(Loader *ld)
{
	if (ld->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)ld);
	struct loader_core *k = ld->core;
	if (k && --k->refs == 0) {
		Volume *v = ld->model->vol;
		pthread_mutex_t *lk = loader_lock(ld);
		pthread_mutex_lock(lk);
		if (k->l && !v->closed && v->vol) {
			/* parked for the next Loader; the one parked before goes */
			struct loader_core *old = v->parked;
			v->parked = k;
			k = old;
		}
		if (k)
			core_destroy(k);
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

static void Buffers_dealloc(Buffers *bu)
{
	if (bu->b) {
		Loader *ld = bu->loader;
		pthread_mutex_t *lk = loader_lock(ld);
		pthread_mutex_lock(lk);
		char err[LASTERR_LEN];
		gnpy_use_device(ld->tier, ld->device, err);
		gpunvme_model_buffers_free(ld->core->l, bu->b);
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
			       const size_t *idx, size_t n, uint64_t max_gap)
{
	if (gnpy_vol_usable(ld->model->vol)) {
		gpunvme_model_free(part);
		return NULL;
	}
	Buffers *bu = PyObject_New(Buffers, &gnpy_BuffersType);
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
	rc = gnpy_use_device(ld->tier, ld->device, err);
	if (!rc && (rc = gpunvme_model_buffers_alloc_sel_gap(ld->core->l, m, idx, n, max_gap, &bu->b)))
		snprintf(err, LASTERR_LEN, "%s: %s", ld->model->path, gpunvme_last_error());
	pthread_mutex_unlock(loader_lock(ld));
	Py_END_ALLOW_THREADS
	if (rc) {
		Py_DECREF(bu);
		return gnpy_raise_err(rc, "%s", err);
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
	PyObject *bu = buffers_place(ld, ld->model->m, NULL, idx, (size_t)n, GPUNVME_MODEL_RUN_GAP);
	free(idx);
	return bu;
}

/* One part of tensor k of m, bytes [start, start + len), as tensor *pt of a
 * part index: the library places and loads it like any tensor (offset in
 * the file moved by start). `what` names the caller in errors. */
static int part_of(const struct gpunvme_model *m, Py_ssize_t k, unsigned long long start, unsigned long long len,
		   struct gpunvme_tensor *pt, const char *what)
{
	if (k < 0 || (size_t)k >= m->n_tensors) {
		gnpy_raise_err(ERANGE, "%s: tensor index %zd out of range (%zu tensors)", what, k, m->n_tensors);
		return -1;
	}
	const struct gpunvme_tensor *t = &m->tensors[k];
	if (!len || start > t->bytes || len > t->bytes - start) {
		gnpy_raise_err(EINVAL, "%s: bytes [%llu, +%llu) are not inside tensor \"%s\" (%llu bytes)", what, start,
			       len, t->name, (unsigned long long)t->bytes);
		return -1;
	}
	*pt = *t;
	pt->offset += start;
	pt->bytes = len;
	pt->ndim = 1;
	pt->shape[0] = len;
	if (!(pt->name = strdup(t->name))) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

/* A part index of n tensors (names NULL until part_of fills them) */
static struct gpunvme_model *parts_new(const struct gpunvme_model *m, size_t n)
{
	struct gpunvme_model *part = calloc(1, sizeof(*part));
	if (!part || !(part->tensors = calloc(n, sizeof(*part->tensors)))) {
		free(part);
		PyErr_NoMemory();
		return NULL;
	}
	part->format = m->format;
	part->file_size = m->file_size;
	return part;
}

/* Buffers over every tensor of a part index (which the Buffers then owns),
 * runs reading across gaps up to max_gap bytes */
static PyObject *parts_place(Loader *ld, struct gpunvme_model *part, uint64_t max_gap)
{
	size_t *idx = malloc((part->n_tensors + 1) * sizeof(*idx));
	if (!idx) {
		gpunvme_model_free(part);
		return PyErr_NoMemory();
	}
	for (size_t i = 0; i < part->n_tensors; i++)
		idx[i] = i;
	PyObject *bu = buffers_place(ld, part, part, idx, part->n_tensors, max_gap);
	free(idx);
	return bu;
}

/* Loader.select_bytes(index, start, length) -> Buffers: bytes [start,
 * start + length) of tensor model.tensors()[index] alone, placed in loader
 * memory (nothing read yet): a slice of rows reads only those rows. */
static PyObject *Loader_select_bytes(Loader *ld, PyObject *args)
{
	Py_ssize_t k;
	unsigned long long start, len;
	if (!PyArg_ParseTuple(args, "nKK", &k, &start, &len))
		return NULL;
	struct gpunvme_model *part = parts_new(ld->model->m, 1);
	if (!part)
		return NULL;
	if (part_of(ld->model->m, k, start, len, &part->tensors[0], "select_bytes")) {
		gpunvme_model_free(part);
		return NULL;
	}
	part->n_tensors = 1;
	return parts_place(ld, part, GPUNVME_MODEL_RUN_GAP);
}

/* Loader.select_parts([(index, start, length), ...], gap=None) -> Buffers:
 * several parts (of one tensor or of several) in one selection,
 * Tensor(bufs, i) being part i: one placement and one load for them all,
 * where a part each cost its own (placement "split": one per device, not
 * one per tensor and device). gap: the widest gap between parts that one
 * read spans (bytes; None: the library's GPUNVME_MODEL_RUN_GAP), 0 when
 * the gaps are someone else's (a split's other rows). */
static PyObject *Loader_select_parts(Loader *ld, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "parts", "gap", NULL };
	PyObject *seq, *gapo = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &gapo))
		return NULL;
	uint64_t max_gap = GPUNVME_MODEL_RUN_GAP;
	if (gapo != Py_None) {
		if (!PyLong_Check(gapo))
			return PyErr_Format(PyExc_TypeError, "select_parts: gap= takes an int (bytes) or None, not %s",
					    Py_TYPE(gapo)->tp_name);
		long long g = PyLong_AsLongLong(gapo);
		if (g == -1 && PyErr_Occurred())
			return NULL; /* OverflowError names it */
		if (g < 0)
			return gnpy_raise_err(EINVAL, "select_parts: gap=%lld: expected 0 or more bytes", g);
		max_gap = (uint64_t)g;
	}
	PyObject *fast = PySequence_Fast(seq, "select_parts() takes a sequence of (index, start, length)");
	if (!fast)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
	if (!n) {
		Py_DECREF(fast);
		return gnpy_raise_err(EINVAL, "select_parts: no parts given");
	}
	struct gpunvme_model *part = parts_new(ld->model->m, (size_t)n);
	if (!part) {
		Py_DECREF(fast);
		return NULL;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		Py_ssize_t k;
		unsigned long long start, len;
		PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
		if (!PyTuple_Check(it) || !PyArg_ParseTuple(it, "nKK", &k, &start, &len)) {
			if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
				PyErr_Clear();
				PyErr_Format(PyExc_TypeError, "select_parts: part %zd is not an (index, start, length) tuple",
					     i);
			}
			break;
		}
		if (part_of(ld->model->m, k, start, len, &part->tensors[i], "select_parts"))
			break;
		part->n_tensors = (size_t)i + 1;
	}
	Py_DECREF(fast);
	if (PyErr_Occurred()) {
		gpunvme_model_free(part);
		return NULL;
	}
	return parts_place(ld, part, max_gap);
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

/* One selection's part of a load (Buffers.load: one; load_many: several) */
struct load_job {
	Buffers *bu;
	struct load_pos p, start; /* where it is; where its step began */
	uint64_t got;             /* bytes of this step */
	bool queued;              /* reads queued on its loader's stream, not waited for */
	bool waited;              /* this step's wait done, its result in wrc */
	int wrc;
	int rc;
	char err[LASTERR_LEN];
	/* GPUNVME_LOAD_PROFILE=1: the host's time queueing this job's reads
	 * and waiting for them, its steps and pieces (load_jobs prints them) */
	uint64_t queue_ns, wait_ns, steps, pieces;
};

/* GPUNVME_LOAD_PROFILE=1: after every load, a line per selection on
 * stderr: where the host's time went (did queueing one GPU's reads wait for
 * them, so that the next GPU's were queued only after?) */
static bool load_profile(void)
{
	static int on = -1; /* read once, under the GIL */
	if (on < 0) {
		const char *e = getenv("GPUNVME_LOAD_PROFILE");
		on = e && *e && strcmp(e, "0") != 0;
	}
	return on;
}

/* GPUNVME_LOAD_STEP_MB=N: every step N MiB (1..65536), not sized from the
 * rate: to measure what a step's end costs (a drain, a wait) on a given
 * device by loading with several step sizes. 0: the rate decides. */
static uint64_t load_step_fixed(void)
{
	static long long v = -1; /* read once, under the GIL */
	if (v < 0) {
		const char *e = getenv("GPUNVME_LOAD_STEP_MB");
		char *end = NULL;
		long long mb = e && *e ? strtoll(e, &end, 10) : 0;
		if (e && *e && (*end || mb < 1 || mb > 65536)) {
			fprintf(stderr, "gpunvme: GPUNVME_LOAD_STEP_MB=%s is not a size in MiB (1..65536): ignored\n", e);
			mb = 0;
		}
		v = mb;
	}
	return (uint64_t)v << 20;
}

/* About `budget` bytes of j's runs from its position on, in one call:
 * queued on the loader's stream (GPU tiers, async; the pieces' reads go
 * to the controller together, so a run does not wait for the last read of
 * the one before it) or read at once (the CPU tier, or a step done again
 * after a failure: one synchronous load, with the loader's retries). With
 * the volume's lock held. */
static int step_pieces(struct load_job *j, uint64_t budget, bool async)
{
	Loader *ld = j->bu->loader;
	const struct gpunvme_model_buffers *b = j->bu->b;
	uint16_t status = 0;
	size_t n = 0, cap = 0;
	struct gpunvme_load_span *sp = NULL;
	while (j->p.k < b->n_runs && j->got < budget) {
		const struct gpunvme_model_run *r = &b->runs[j->p.k];
		/* ends at a 4 KiB file offset where it can: the next step starts
		 * on a block boundary, so no block is read twice through the
		 * bounce buffer */
		const uint64_t len = gpunvme_model_run_piece(b, j->p.k, j->p.o, budget - j->got);
		if (len) {
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				struct gpunvme_load_span *g = realloc(sp, cap * sizeof(*sp));
				if (!g) {
					free(sp);
					snprintf(j->err, LASTERR_LEN, "%s: loading: out of memory", ld->model->path);
					return -ENOMEM;
				}
				sp = g;
			}
			/* the run's edge blocks into its slack where enabled
			 * (GPUNVME_LOAD_EDGES); the piece is inside run k */
			(void)gpunvme_model_run_span(b, j->p.k, j->p.o, len, &sp[n++]);
		}
		j->got += len;
		if ((j->p.o += len) == r->len) {
			j->p.k++;
			j->p.o = 0;
		}
	}
	int rc = 0;
	if (n) {
		rc = async ? gpunvme_load_layers_async(ld->core->l, sp, n, NULL, NULL)
			   : gpunvme_load_layers(ld->core->l, sp, n, &status);
		j->queued |= async && !rc;
		j->pieces += n;
	}
	free(sp);
	if (rc)
		snprintf(j->err, LASTERR_LEN, "%s: loading: %s", ld->model->path, gpunvme_last_error());
	return rc;
}

/* One locked, GIL-free step of every unfinished job: each queues about
 * `budget` bytes on its own loader's stream (GPU tiers; the CPU tier reads
 * them at once), and only then is each waited for, so that the loaders of
 * several GPUs read at the same time, as the runs of one step overlap in
 * gpunvme_model_load. A failed wait (which queued piece failed is not
 * known) does that job's step again, one synchronous load a piece, with
 * the loader's retries (the wait recovered the queues). A job's failure
 * stops none of the others' waits: their memory may be freed next. */
static void load_step_many(struct load_job *jobs, size_t n, uint64_t budget)
{
	pthread_mutex_t *lk = loader_lock(jobs[0].bu->loader);
	pthread_mutex_lock(lk);
	for (size_t i = 0; i < n; i++) {
		struct load_job *j = &jobs[i];
		j->start = j->p;
		j->got = 0;
		j->queued = false;
		j->waited = false;
		if (j->rc || j->p.k >= j->bu->b->n_runs)
			continue;
		Loader *ld = j->bu->loader;
		const uint64_t t0 = now_ns();
		if (!(j->rc = gnpy_use_device(ld->tier, ld->device, j->err)) && !(j->rc = loader_aim(ld, j->err)))
			j->rc = step_pieces(j, budget, ld->tier != GPUNVME_TIER_CPU);
		j->queue_ns += now_ns() - t0;
		j->steps++;
	}
	for (size_t i = 0; i < n; i++) {
		struct load_job *j = &jobs[i];
		if (!j->queued)
			continue;
		Loader *ld = j->bu->loader;
		uint16_t status = 0;
		char derr[LASTERR_LEN];
		j->queued = false;
		int drc = gnpy_use_device(ld->tier, ld->device, derr);
		if (drc) {
			/* its device cannot be made current: nothing can be
			 * waited for or done again here */
			if (!j->rc) {
				j->rc = drc;
				snprintf(j->err, LASTERR_LEN, "%s", derr);
			}
			continue;
		}
		/* One wait per loader: it takes the status of every read queued
		 * on it this step. A job whose loader an earlier job waited for
		 * (two selections of one Loader) takes that result: a failure
		 * there may be this job's reads', so it does its step again too
		 * (a second wait would find the status taken and report
		 * success). */
		size_t k = 0;
		while (k < i && !(jobs[k].waited && jobs[k].bu->loader->core->l == ld->core->l))
			k++;
		const uint64_t t0 = now_ns();
		int rc2 = k < i ? jobs[k].wrc : gpunvme_layer_loader_wait(ld->core->l, &status);
		j->wait_ns += now_ns() - t0;
		j->waited = true;
		j->wrc = rc2;
		if (!j->rc && (rc2 == -ETIMEDOUT || rc2 == -EIO)) {
			j->p = j->start;
			j->got = 0;
			/* another job may have pointed a shared loader at its file */
			if (!(j->rc = loader_aim(ld, j->err)))
				j->rc = step_pieces(j, budget, false);
		} else if (rc2 && !j->rc) {
			j->rc = rc2;
			snprintf(j->err, LASTERR_LEN, "%s: loading: %s", ld->model->path, gpunvme_last_error());
		}
	}
	pthread_mutex_unlock(lk);
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
	gpunvme_layer_loader_release_queues(ld->core->l);
	pthread_mutex_unlock(loader_lock(ld));
	Py_END_ALLOW_THREADS
}

/* Load every job's runs in steps (progress(done, total) after each step,
 * bytes of all jobs); Ctrl-C stops at the end of the step it arrives in.
 * The first failure is raised, after every job's step has ended; only the
 * jobs that read everything are marked loaded. */
static PyObject *load_jobs(struct load_job *jobs, size_t n, PyObject *cb)
{
	const uint64_t fixed = load_step_fixed();
	uint64_t done = 0, all = 0, budget = fixed ? fixed : LOAD_STEP_MIN;
	for (size_t i = 0; i < n; i++) {
		jobs[i].bu->loaded = false;
		all += jobs[i].bu->b->run_bytes;
	}
	PyObject *ret = Py_None;
	for (;;) {
		size_t active = 0;
		for (size_t i = 0; i < n; i++)
			active += jobs[i].p.k < jobs[i].bu->b->n_runs;
		if (!active)
			break;
		uint64_t t0 = now_ns(), got = 0;
		Py_BEGIN_ALLOW_THREADS
		load_step_many(jobs, n, budget);
		Py_END_ALLOW_THREADS
		uint64_t dt = now_ns() - t0;
		size_t failed = n;
		for (size_t i = 0; i < n; i++) {
			got += jobs[i].got;
			if (jobs[i].rc && failed == n)
				failed = i;
		}
		if (failed < n) {
			gnpy_raise_err(jobs[failed].rc, "%s", jobs[failed].err);
			ret = NULL;
			break;
		}
		done += got;
		if (cb != Py_None) {
			PyObject *res = PyObject_CallFunction(cb, "KK", (unsigned long long)done, (unsigned long long)all);
			if (!res) {
				ret = NULL;
				break;
			}
			Py_DECREF(res);
		}
		if (PyErr_CheckSignals()) {
			ret = NULL;
			break;
		}
		/* each job's bytes per LOAD_STEP_NS at this step's rate (in
		 * doubles: no overflow, and a zero time is the largest step) */
		double per = (double)got / (double)active;
		double next = dt ? per * (double)LOAD_STEP_NS / (double)dt : (double)LOAD_STEP_MAX;
		if (next > 8.0 * (double)budget)
			next = 8.0 * (double)budget;
		budget = fixed ? fixed
		       : next > (double)LOAD_STEP_MAX ? LOAD_STEP_MAX
		       : next < (double)LOAD_STEP_MIN ? LOAD_STEP_MIN : (uint64_t)next;
	}
	for (size_t i = 0; load_profile() && i < n; i++) {
		const struct load_job *j = &jobs[i];
		fprintf(stderr,
			"gpunvme load profile: %s, tier %d device %d: %zu runs, %llu bytes, %llu steps, %llu pieces; "
			"queueing %.4f s, waiting %.4f s\n",
			j->bu->loader->model->path, j->bu->loader->tier, j->bu->loader->device, j->bu->b->n_runs,
			(unsigned long long)j->bu->b->run_bytes, (unsigned long long)j->steps,
			(unsigned long long)j->pieces, (double)j->queue_ns / 1e9, (double)j->wait_ns / 1e9);
	}
	for (size_t i = 0; i < n; i++) {
		/* a Loader listed twice (two selections of it) ends once */
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++)
			seen = jobs[k].bu->loader == jobs[i].bu->loader;
		if (!seen)
			load_end(jobs[i].bu->loader);
		if (ret)
			jobs[i].bu->loaded = true;
	}
	if (ret)
		Py_INCREF(ret);
	return ret;
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
	if (gnpy_vol_usable(bu->loader->model->vol))
		return NULL;
	struct load_job j = { .bu = bu };
	return load_jobs(&j, 1, cb);
}

/* _gpunvme.load_many(buffers, progress=None): several selections of one
 * volume (one per GPU: placement "layers", "size", "split") loaded
 * together, each step queued on every loader before any is waited for, so
 * that the GPUs read at the same time: one after the other, each step's
 * tail (the last reads, the wait) idled the others. progress(done, total)
 * counts the bytes of all. */
PyObject *gnpy_load_many(PyObject *self, PyObject *args, PyObject *kw)
{
	(void)self;
	static char *kwlist[] = { "buffers", "progress", NULL };
	PyObject *seq, *cb = Py_None;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &seq, &cb))
		return NULL;
	PyObject *fast = PySequence_Fast(seq, "load_many() takes a sequence of Buffers");
	if (!fast)
		return NULL;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
	if (!n) {
		Py_DECREF(fast);
		return gnpy_raise_err(EINVAL, "load_many: no Buffers given");
	}
	struct load_job *jobs = calloc((size_t)n, sizeof(*jobs));
	if (!jobs) {
		Py_DECREF(fast);
		return PyErr_NoMemory();
	}
	PyObject *ret = NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
		if (!PyObject_TypeCheck(it, &gnpy_BuffersType)) {
			PyErr_Format(PyExc_TypeError, "load_many: item %zd is a %s, not Buffers (Loader.select...)", i,
				     Py_TYPE(it)->tp_name);
			goto out;
		}
		Buffers *bu = (Buffers *)it;
		if (bu->loader->model->vol != ((Buffers *)PySequence_Fast_GET_ITEM(fast, 0))->loader->model->vol) {
			gnpy_raise_err(EINVAL, "load_many: Buffers %zd is of another volume than Buffers 0: "
					       "load each volume's with its own call",
				       i);
			goto out;
		}
		for (Py_ssize_t k = 0; k < i; k++)
			if (jobs[k].bu == bu) {
				gnpy_raise_err(EINVAL, "load_many: Buffers %zd is also item %zd: give each once", i, k);
				goto out;
			}
		/* held for the load: a progress callback may drop the caller's */
		Py_INCREF(bu);
		jobs[i].bu = bu;
	}
	if (!gnpy_vol_usable(jobs[0].bu->loader->model->vol))
		ret = load_jobs(jobs, (size_t)n, cb);
out:
	for (Py_ssize_t i = 0; i < n; i++)
		Py_XDECREF(jobs[i].bu);
	free(jobs);
	Py_DECREF(fast);
	return ret;
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

static PyObject *Tensor_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffers", "index", NULL };
	Buffers *bu;
	Py_ssize_t k;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!n", kwlist, &gnpy_BuffersType, &bu, &k))
		return NULL;
	if (k < 0 || (size_t)k >= bu->b->n_tensors)
		return gnpy_raise_err(EINVAL, "tensor index %zd out of range (%zu selected)", k, bu->b->n_tensors);
	if (!bu->loaded)
		return gnpy_raise_err(EINVAL, "the tensors are not loaded yet: call load() first");
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
static PyObject *Tensor_dlpack(Tensor *t, PyObject *args, PyObject *kw)
{
	int32_t dt, id;
	tensor_device(t, &dt, &id);
	return gnpy_dl_export(args, kw, t->owner->b->ptr[t->k], t->owner->b->tensors[t->k]->bytes, dt, id,
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

/* ---- the types -------------------------------------------------------------------- */

static PyMethodDef Loader_methods[] = {
	{ "select", (PyCFunction)Loader_select, METH_VARARGS, "select(indices) -> Buffers" },
	{ "select_bytes", (PyCFunction)Loader_select_bytes, METH_VARARGS,
	  "select_bytes(index, start, length) -> Buffers: part of one tensor" },
	{ "select_parts", (PyCFunction)(void (*)(void))Loader_select_parts, METH_VARARGS | METH_KEYWORDS,
	  "select_parts([(index, start, length), ...], gap=None) -> Buffers: parts of tensors, one selection" },
	{ NULL, NULL, 0, NULL },
};

/* how many Loaders share this one's loader (itself included) */
static PyObject *Loader_sharing(Loader *ld, void *unused)
{
	(void)unused;
	return PyLong_FromSsize_t(ld->core ? ld->core->refs : 0);
}

static PyGetSetDef Loader_getset[] = {
	{ "sharing", (getter)Loader_sharing, NULL, "how many Loaders share its loader (share=), itself included", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject gnpy_LoaderType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "gpunvme._gpunvme.Loader",
	.tp_basicsize = sizeof(Loader),
	.tp_weaklistoffset = offsetof(Loader, weakrefs),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Loader(model, tier, device=0, queues=0, depth=0, share=None)",
	.tp_new = Loader_new,
	.tp_dealloc = (destructor)Loader_dealloc,
	.tp_methods = Loader_methods,
	.tp_getset = Loader_getset,
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

PyTypeObject gnpy_BuffersType = {
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

PyTypeObject gnpy_TensorType = {
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
