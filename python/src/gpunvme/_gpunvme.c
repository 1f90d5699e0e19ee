/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * gpunvme._gpunvme: the module (its types, gpunvme.Error, the constants)
 * and what every file of the extension shares: raising gpunvme.Error with
 * the library's message, and paths inside a volume. _gpunvme.h lists the
 * files and tells the object graph and the locking.
 */
#include "_gpunvme.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gpunvme/emu.h"
#include "gpunvme/gpunvme.h"
#include "gpunvme/tier.h"

/* ---- errors -------------------------------------------------------------------- */

PyObject *gnpy_Error;

PyObject *gnpy_raise_err(int rc, const char *fmt, ...)
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
		PyErr_SetObject(gnpy_Error, args);
		Py_DECREF(args);
	}
	return NULL;
}

void gnpy_save_err(char *buf)
{
	snprintf(buf, LASTERR_LEN, "%s", gpunvme_last_error());
}

/* ---- paths ----------------------------------------------------------------------- */

/*
 * A path inside a volume: str, bytes or os.PathLike -> bytes (the caller
 * drops the reference). str is encoded as os.fsencode() does, with
 * surrogateescape, because listdir() decodes names that way: a non-UTF-8
 * name it gave back as 'caf\udce9' must find the same file again.
 */
int gnpy_path_conv(PyObject *o, void *out)
{
	if (!o) /* PyArg_Parse* cleaning up after a later argument failed */
		return PyUnicode_FSConverter(NULL, out);
	int r = PyUnicode_FSConverter(o, out);
	if (!r && PyErr_ExceptionMatches(PyExc_ValueError)) {
		/* a bad value, not a bad type: gpunvme.Error like every other one */
		PyErr_Clear();
		gnpy_raise_err(EINVAL, "a path holds a NUL byte, which no file name can: remove it");
	}
	return r;
}

/* ---- the module -------------------------------------------------------------------- */

static PyMethodDef mod_methods[] = {
	{ "cuda_device_count", gnpy_cuda_device_count, METH_NOARGS, "GPUs the CUDA runtime sees (0 without CUDA)" },
	{ "load_many", (PyCFunction)(void (*)(void))gnpy_load_many, METH_VARARGS | METH_KEYWORDS,
	  "load_many(buffers, progress=None): several selections of one volume loaded together" },
	{ NULL, NULL, 0, NULL },
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
	/* Torch code blocks in CUDA (.cpu(), .item()) while reads may be in
	 * flight: against the emulator, its copies then run in a process of
	 * their own (src/emu_cuda/dma_proto.h; GPUNVME_EMU_DMA, set, wins).
	 * Not through the environment: programs this one starts keep theirs */
	gpunvme_emu_set_copies(GPUNVME_EMU_COPIES_PROCESS);
	PyTypeObject *types[] = { &gnpy_VolumeType, &gnpy_ModelType,  &gnpy_LoaderType, &gnpy_BuffersType,
				  &gnpy_TensorType, &gnpy_StreamType, &gnpy_ViewType,  &gnpy_ExpertsType };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyType_Ready(types[i]) < 0)
			return NULL;
	PyObject *m = PyModule_Create(&moddef);
	if (!m)
		return NULL;
	gnpy_Error = PyErr_NewExceptionWithDoc("gpunvme.Error",
					       "A gpunvme failure: errno and strerror (the library's message, with the fix).",
					       PyExc_OSError, NULL);
	if (!gnpy_Error || PyModule_AddObjectRef(m, "Error", gnpy_Error) < 0)
		goto fail;
	const char *names[] = { "Volume", "Model", "Loader", "Buffers", "Tensor", "Stream", "View", "Experts" };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0)
			goto fail;
	if (PyModule_AddObjectRef(m, "HAVE_CUDA", gnpy_have_cuda() ? Py_True : Py_False) < 0)
		goto fail;
	if (PyModule_AddIntConstant(m, "TIER_CPU", GPUNVME_TIER_CPU) || PyModule_AddIntConstant(m, "TIER_1", GPUNVME_TIER_1) ||
	    PyModule_AddIntConstant(m, "TIER_2", GPUNVME_TIER_2))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
