# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: load safetensors/GGUF tensors from an NVMe namespace (no mount).

The extension is built from this repository's C sources: CMake builds the
library targets (libgpunvme, and libgpunvme_cuda with the emulator's copy
engine libgpunvme_emu_cuda when CUDA is on) as static, position-independent
archives, and they are linked into the extension.

    python3 -m venv --system-site-packages v
    v/bin/pip install --no-build-isolation ./python

GPUNVME_CUDA=AUTO|ON|OFF (default AUTO: CUDA when nvcc is found) picks the
CUDA backend; device="cuda" needs it.
"""
import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _repo_or_die():
    # pip >= 21.3 builds a local directory in place, so the repository is
    # the parent of this one; a copied-out sdist has no C sources to build
    if not (os.path.isfile(os.path.join(REPO, "CMakeLists.txt"))
            and os.path.isfile(os.path.join(REPO, "include", "gpunvme", "gpunvme.h"))):
        sys.exit(
            "gpunvme: cannot find the gpu-nvme-direct sources at %s (expected CMakeLists.txt and "
            "include/gpunvme/gpunvme.h next to python/). Install from a checkout, in place: "
            "pip install --no-build-isolation ./python (pip >= 21.3; older pip copies the "
            "directory elsewhere: upgrade pip or run python3 setup.py build_ext --inplace)" % REPO)


class CMakeBuildExt(build_ext):
    def build_extension(self, ext):
        _repo_or_die()
        cuda = os.environ.get("GPUNVME_CUDA", "AUTO").upper()
        if cuda not in ("AUTO", "ON", "OFF"):
            sys.exit("gpunvme: GPUNVME_CUDA=%s: expected AUTO, ON or OFF" % cuda)
        bdir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        cfg = [
            "cmake", "-S", REPO, "-B", bdir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
            "-DGPUNVME_CUDA=" + cuda,
            "-DGPUNVME_SANITIZE=",
            "-DGPUNVME_FUZZ=OFF",
        ]
        # GPU architectures: CMAKE_CUDA_ARCHITECTURES (or CMake's own CUDAARCHS)
        # from the environment, e.g. 90 for an H100 only; default 80;86;90
        arch = os.environ.get("CMAKE_CUDA_ARCHITECTURES") or os.environ.get("CUDAARCHS")
        if arch:
            cfg.append("-DCMAKE_CUDA_ARCHITECTURES=" + arch)
        try:
            subprocess.check_call(cfg)
        except FileNotFoundError:
            sys.exit("gpunvme: cmake not found: install it (Debian: apt-get install cmake, "
                     "or scripts/install-deps.sh)")
        except subprocess.CalledProcessError as e:
            sys.exit("gpunvme: configuring the library with CMake failed (%s); see the output above" % e)
        conf = {}
        with open(os.path.join(bdir, "gpunvme-python.cfg")) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k:
                    conf[k] = v
        have_cuda = conf.get("cuda") == "1"
        targets = ["gpunvme"] + (["gpunvme_cuda", "gpunvme_emu_cuda"] if have_cuda else [])
        jobs = str(os.cpu_count() or 2)
        try:
            subprocess.check_call(["cmake", "--build", bdir, "-j", jobs, "--target"] + targets)
        except subprocess.CalledProcessError as e:
            sys.exit("gpunvme: building the library failed (%s); see the output above" % e)
        lib = os.path.join(bdir, "lib")
        # static archives: the CUDA backend first, it uses the core library.
        # The emulator's copy engine is referred to only weakly (by the emu:
        # bus), so it is pulled in by name, as CMake's gpunvme_emu_cuda does
        ext.extra_objects = ([os.path.join(lib, "libgpunvme_cuda.a"),
                              os.path.join(lib, "libgpunvme_emu_cuda.a")] if have_cuda else []) + \
            [os.path.join(lib, "libgpunvme.a")]
        # setuptools relinks only when a dependency is newer than the
        # extension, and extra_objects are not dependencies: without this
        # a library change (src/) left an in-tree rebuild with the old code
        ext.depends = list(ext.extra_objects)
        if have_cuda:
            ext.extra_link_args = ["-Wl,--undefined=gpunvme_emu_cuda_engine"]
        ext.include_dirs = [os.path.join(REPO, "include")]
        ext.libraries = ["pthread", "m"]
        if have_cuda:
            ext.define_macros = [("GPUNVME_PY_CUDA", "1")]
            ext.include_dirs += conf["cuda_include"].split(";")
            ext.library_dirs = [conf["cuda_libdir"]]
            ext.runtime_library_dirs = [conf["cuda_libdir"]]
            ext.libraries = ["cudart", "stdc++"] + ext.libraries
        print("gpunvme: CUDA backend %s" % ("in (device=\"cuda\" works)" if have_cuda else
                                            "not built (device=\"cpu\" only; GPUNVME_CUDA=ON to insist)"))
        super().build_extension(ext)


setup(
    name="gpunvme",
    version="0.1.0",
    description="Load safetensors/GGUF tensors from an NVMe namespace through a user-space driver",
    license="BSD-2-Clause",
    packages=["gpunvme"],
    # src layout: running pytest from python/ imports the installed package
    # (with its extension), not this source tree
    package_dir={"": "src"},
    python_requires=">=3.9",
    install_requires=[],  # numpy / torch are optional at install: framework= picks one at run time
    ext_modules=[
        Extension(
            "gpunvme._gpunvme",
            # one file per type or concern; _gpunvme.h holds what they share
            # (and lists them). Built with and without CUDA: only
            # _gpunvme_cuda.c tests GPUNVME_PY_CUDA
            sources=["src/gpunvme/" + f for f in (
                "_gpunvme.c", "_gpunvme_cuda.c", "_gpunvme_volume.c", "_gpunvme_model.c",
                "_gpunvme_loader.c", "_gpunvme_stream.c", "_gpunvme_dlpack.c", "_gpunvme_moe.c")],
            depends=["src/gpunvme/_gpunvme.h"],
            extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
                                "-fvisibility=hidden"],
        )
    ],
    cmdclass={"build_ext": CMakeBuildExt},
    zip_safe=False,
)
