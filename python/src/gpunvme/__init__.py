# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: tensors of safetensors / GGUF files on an NVMe namespace, loaded
through the gpu-nvme-direct user-space driver (no mount, no page cache).

    import gpunvme
    sd = gpunvme.load_file("emu:/tmp/ext4.img", "/models/m.safetensors", device="cuda")
    sd = gpunvme.load_pretrained("emu:/tmp/ext4.img", "/models/llama", device="cuda")
    for i, layer in gpunvme.stream("emu:/tmp/ext4.img", "/models/llama", layers="model.layers.{i}.", window=2):
        ...   # layer: {name: tensor}, valid until the next step
    with gpunvme.safe_open("emu:/tmp/ext4.img", "/models/m.safetensors", framework="np") as f:
        w = f.get_tensor("w")

Tensors are views of loader memory handed over by DLPack (no copy); that
memory lives as long as any tensor over it does. Ownership rules, the dtype
mapping and errors: docs/python.md.
"""
import os
import sys
import warnings

# The CUDA settings the library needs (src/cuda/gpu_queues.cu says why:
# with the emulator's copy engine, lazy module loading and too few hardware
# queues make a read kernel wait for copies that wait for it). The C
# library sets them in the process environment when it loads, but Python's
# os.environ does not see that, and torch sets CUDA_MODULE_LOADING=LAZY when
# it first initialises CUDA unless os.environ already names a value. So they
# go into os.environ here, before any CUDA use. A value the user chose wins.
_CUDA_ENV = {"CUDA_MODULE_LOADING": "EAGER", "CUDA_DEVICE_MAX_CONNECTIONS": "32"}
_torch = sys.modules.get("torch")
_cuda_up = bool(_torch is not None and getattr(_torch, "cuda", None) is not None and _torch.cuda.is_initialized())
for _k, _v in _CUDA_ENV.items():
    if _k not in os.environ:
        if _cuda_up:
            warnings.warn("gpunvme was imported after CUDA was initialised: %s is not %s, and GPU loads from the "
                          "emulator may stall until their timeout; import gpunvme before the first CUDA call, or "
                          "set %s=%s in the environment" % (_k, _v, _k, _v), RuntimeWarning, stacklevel=2)
        os.environ[_k] = _v
    elif os.environ[_k] != _v and _k == "CUDA_MODULE_LOADING":
        warnings.warn("CUDA_MODULE_LOADING=%s: with lazy loading, a kernel's first launch while a GPU read from "
                      "the emulator runs can stall the read until its timeout; use EAGER" % os.environ[_k],
                      RuntimeWarning, stacklevel=2)

from . import _gpunvme
from ._gpunvme import Error, HAVE_CUDA

__all__ = ["Error", "TIER_AUTO", "Volume", "release_volumes", "load_file", "safe_open", "load_pretrained", "StateDict", "HAVE_CUDA", "cuda_available",
           "stream", "LayerStream", "stream_decoder", "moe_decoder", "ExpertCache"]

# The package by concern (docs/python.md); the names below are its API, and
# the private ones the tests reach for.
from ._parse import TIER_AUTO, _FRAMEWORKS, _GGML_PLAIN, _Info, _NP, _NP_RAW, _SUB_BITS, _TORCH, _device, _framework, _real_dtype_name, _shape_dtype, _tier, _wrap  # noqa: F401
from ._volumes import Volume, release_volumes, _done, _path, _shown, _volume  # noqa: F401
from ._loading import StateDict, _Progress, _fill, _index, _load, _queue_opts, _select  # noqa: F401
from ._placement import PLACEMENTS, _LAYER_RE, _devices, _layer_of, _load_multi, _place, _split_rows  # noqa: F401
from ._safetensors import _Slice, cuda_available, load_file, load_pretrained, safe_open  # noqa: F401
from ._stream import LayerStream, _cuda_stream_ptr, stream  # noqa: F401
from ._transformers import _rebuild_rotary, moe_decoder, stream_decoder  # noqa: F401
from ._moe import ExpertCache  # noqa: F401
