/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme: the CPython extension over libgpunvme. It holds the C
 * objects and hands tensor memory out through DLPack; gpunvme/__init__.py
 * turns that into numpy/torch tensors of the right dtype and shape.
 *
 * This header is the extension's internal one: what its files share. Every
 * .c file includes it first (it includes Python.h). The files, one concern
 * each:
 *
 *   _gpunvme.c         the module: init, gpunvme.Error and raise_err, paths
 *   _gpunvme_cuda.c    the CUDA runtime (the one file that tests
 *                      GPUNVME_PY_CUDA): devices, the loader's GPU backend
 *   _gpunvme_volume.c  Volume: open, stat, listdir, read, tier_choose
 *   _gpunvme_model.c   Model: a model file's (or set's) index, open_model
 *   _gpunvme_loader.c  Loader, Buffers (a selection, loaded in steps), Tensor
 *   _gpunvme_stream.c  Stream (a layer stream) and View
 *   _gpunvme_dlpack.c  the DLPack capsule Tensor and View export
 *   _gpunvme_moe.c     Experts: a model's expert index and a CPU-tier expert cache
 *
 * Names shared between files begin gnpy_: the extension is linked with the
 * library's static archives, whose own symbols must not meet them.
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
#ifndef GPUNVME_PY_GPUNVME_H
#define GPUNVME_PY_GPUNVME_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct gpunvme_volume;
struct gpunvme_ctrl;
struct gpunvme_fs;
struct gpunvme_md_volume;
struct gpunvme_model_set;
struct gpunvme_model;
struct gpunvme_extent;
struct gpunvme_loader_gpu_ops;

/* ---- errors (_gpunvme.c) --------------------------------------------------------- */

extern PyObject *gnpy_Error; /* gpunvme.Error(OSError): errno, strerror = the library's message */

/* Raise gpunvme.Error(|rc|, message); returns NULL */
PyObject *gnpy_raise_err(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The thread's last library message, copied before the GIL is taken back
 * (it is per thread, and another library call could overwrite it). */
#define LASTERR_LEN 1024
void gnpy_save_err(char *buf);

/* A path inside a volume (PyArg_Parse "O&"): str, bytes or os.PathLike ->
 * bytes (the caller drops the reference) */
int gnpy_path_conv(PyObject *o, void *out);

/* ---- CUDA (_gpunvme_cuda.c) ------------------------------------------------------ */

bool gnpy_have_cuda(void);
/* tier (of a Loader or Stream being made) needs CUDA and this build has
 * none: -1 with gpunvme.Error raised */
int gnpy_tier_built(int tier);
/* A GPU tier: *gpu = the loader's CUDA backend and device made current
 * (err holds the message when it fails); the CPU tier: nothing. No GIL. */
int gnpy_gpu_prepare(int tier, int device, const struct gpunvme_loader_gpu_ops **gpu, char *err);
/* A GPU tier: device made current before a library call on its memory */
int gnpy_use_device(int tier, int device, char *err);
PyObject *gnpy_cuda_device_count(PyObject *m, PyObject *unused);
/* The GPU expert cache (moe_gpu.h) for Experts: -ENOTSUP without CUDA; the
 * message in err. Device made current first. No GIL needed. */
struct gpunvme_moe_index;
struct gpunvme_gpu_experts;
struct gpunvme_gpu_experts_stats;
int gnpy_gpu_experts_open(struct gpunvme_volume *v, const struct gpunvme_moe_index *x, const struct gpunvme_extent *ext,
			  size_t n, uint64_t size, uint32_t slots, int tier, int device, struct gpunvme_gpu_experts **g,
			  char *err);
int gnpy_gpu_experts_fetch(struct gpunvme_gpu_experts *g, int device, uint32_t i, uintptr_t ids, uint32_t k,
			   uintptr_t slots, uintptr_t stream, char *err);
int gnpy_gpu_experts_sync(struct gpunvme_gpu_experts *g, int device, uintptr_t stream,
			  struct gpunvme_gpu_experts_stats *st, char *err);
void gnpy_gpu_experts_close(struct gpunvme_gpu_experts *g, int device);
void gnpy_gpu_experts_layout(const struct gpunvme_gpu_experts *g, uint8_t **base, const uint64_t **off,
			     uint64_t *slot_bytes, int *tier);

/* ---- Volume (_gpunvme_volume.c) -------------------------------------------------- */

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
	/* the loader (queues, bounce buffer) of the last Loader to go, kept
	 * for the next one of the same tier, device and queues (lock) */
	struct loader_core *parked;
} Volume;

extern PyTypeObject gnpy_VolumeType;

struct loader_core;
/* the parked loader goes (the volume's lock held, or no one else can
 * reach it); _gpunvme_loader.c */
void gnpy_loader_unpark(Volume *v);
/* Volume._parked: (tier, device, queues, depth, serial) of the parked
 * loader, or None (for tests and diagnostics) */
PyObject *gnpy_loader_parked(Volume *v);

/* the volume's controllers and file system go (the lock held, or no one
 * else can reach it) */
void gnpy_vol_release(Volume *v);
/* -1 with gpunvme.Error raised when the volume is closed */
int gnpy_vol_usable(Volume *v);

/* ---- Model (_gpunvme_model.c) ---------------------------------------------------- */

typedef struct {
	PyObject_HEAD
	Volume *vol;
	struct gpunvme_model_set *set; /* owns everything below */
	struct gpunvme_model *m;      /* every tensor of every file of the set */
	struct gpunvme_extent *ext;   /* the set's address space */
	size_t n_ext;
	uint64_t size;                /* bytes of the file (or set's address space) */
	char *path;
	uint64_t uid;                 /* this Model's number in the process, never reused (a
	                                 shared loader's file: _gpunvme_loader.c) */
} Model;

extern PyTypeObject gnpy_ModelType;

/* Volume.open_model(path) -> Model */
PyObject *gnpy_model_open(Volume *v, const char *path);

/* ---- Loader, Buffers, Tensor (_gpunvme_loader.c) --------------------------------- */

extern PyTypeObject gnpy_LoaderType, gnpy_BuffersType, gnpy_TensorType;
/* _gpunvme.load_many(buffers, progress=None): selections of one volume
 * loaded together, each step queued on every loader before any is waited
 * for */
PyObject *gnpy_load_many(PyObject *self, PyObject *args, PyObject *kw);

/* ---- Stream, View (_gpunvme_stream.c) -------------------------------------------- */

extern PyTypeObject gnpy_StreamType, gnpy_ViewType;

/* ---- Experts (_gpunvme_moe.c) ----------------------------------------------------- */

extern PyTypeObject gnpy_ExpertsType;

/* ---- DLPack (_gpunvme_dlpack.c) -------------------------------------------------- */

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 }; /* DLDeviceType */

extern char gnpy_zero_byte; /* data pointer of zero-size host tensors: never NULL */

/* __dlpack__(stream=None, max_version=None, dl_device=None, copy=None) of
 * nbytes of uint8 at p on device (dt, id), kept alive by owner: the one
 * capsule builder for tensors and views */
PyObject *gnpy_dl_export(PyObject *args, PyObject *kw, void *p, uint64_t nbytes, int32_t dt, int32_t id,
			 PyObject *owner);

#endif
