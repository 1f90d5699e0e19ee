# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: dtypes, frameworks, and the device/tier arguments (the tier itself is the library's policy: tier.h)."""
from ._gpunvme import Error, HAVE_CUDA


# ---- dtypes -------------------------------------------------------------------

# safetensors / GGUF dtype -> (numpy dtype name or None, torch dtype name or None).
# numpy has no bfloat16 / float8 / float4: those come back as their raw bits
# (uint16 / uint8) and the real dtype is in StateDict.dtypes.
_NP = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "I32": "int32", "U32": "uint32", "F32": "float32", "F64": "float64",
    "I64": "int64", "U64": "uint64", "C64": "complex64",
}
_NP_RAW = {"BF16": "uint16", "F8_E4M3": "uint8", "F8_E5M2": "uint8", "F8_E8M0": "uint8",
           "F8_E4M3FNUZ": "uint8", "F8_E5M2FNUZ": "uint8"}
_TORCH = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "F64": "float64", "I64": "int64", "U64": "uint64", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
# sub-byte safetensors dtypes -> bits per element (handed out as packed bytes)
_SUB_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
# GGUF's unquantized ggml types, as safetensors names
_GGML_PLAIN = {"F32": "F32", "F16": "F16", "BF16": "BF16", "F64": "F64",
               "I8": "I8", "I16": "I16", "I32": "I32", "I64": "I64"}

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}


def _framework(fw):
    if not isinstance(fw, str) or fw.lower() not in _FRAMEWORKS:
        raise Error(22, "framework=%r: expected \"pt\" (torch) or \"numpy\" (\"np\")" % (fw,))
    fw = _FRAMEWORKS[fw.lower()]
    if fw == "pt":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise Error(95, "framework=\"pt\" needs torch, which is not importable here: install torch, "
                            "or use framework=\"numpy\"") from None
    return fw


TIER_AUTO = -1


def _tier(vol, tier):
    """The library's one tier policy (the same as gpunvme load's and the
    layer stream's) for a GPU device on vol: TIER_AUTO -> 2 or 1 by the
    controllers' capabilities; an explicit tier they cannot do raises Error
    (EOPNOTSUPP) saying why and which tier to use. The CPU tier is always
    possible."""
    return tier if tier == 0 else vol.tier_choose(tier)


def _device(device, tier):
    """-> (tier number, cuda device index, canonical device string)"""
    if device is None:
        device = "cpu"
    if not isinstance(device, str):
        # torch.device, or an int meaning cuda:N as safetensors accepts
        if isinstance(device, int) and not isinstance(device, bool):
            device = "cuda:%d" % device
        elif type(device).__name__ == "device" and hasattr(device, "type"):
            device = str(device)
        else:
            raise Error(22, "device=%r: expected \"cpu\", \"cuda\" or \"cuda:N\"" % (device,))
    d = device.strip().lower()
    if tier is not None and tier not in (0, 1, 2, "cpu", "1", "2"):
        raise Error(22, "tier=%r: expected 1 (pinned host memory), 2 (GPU memory) or \"cpu\"" % (tier,))
    if tier in ("cpu", 0):
        tier = 0
    elif tier is not None:
        tier = int(tier)
    if d == "cpu":
        if tier not in (None, 0):
            raise Error(22, "tier=%s needs device=\"cuda[:N]\" (device=\"cpu\" loads through the CPU data path)"
                        % tier)
        return 0, 0, "cpu"
    if d == "cuda" or d.startswith("cuda:"):
        idx = 0
        if d.startswith("cuda:"):
            try:
                idx = int(d[5:])
            except ValueError:
                raise Error(22, "device=%r: expected cuda:N with N a GPU index" % device) from None
            if idx < 0:
                raise Error(22, "device=%r: negative GPU index" % device)
        if not HAVE_CUDA:
            raise Error(95, "device=%r: this gpunvme extension was built without CUDA: rebuild it on a "
                            "machine with nvcc: GPUNVME_CUDA=ON pip install --no-build-isolation ./python"
                        % device)
        if tier == 0:
            raise Error(22, "tier=\"cpu\" with device=%r: give device=\"cpu\"" % device)
        # no tier: the library's tier policy picks, once the volume is open
        # (_tier): 2 where its controllers can DMA into GPU memory, else 1
        return (TIER_AUTO if tier is None else tier), idx, "cuda:%d" % idx
    raise Error(22, "device=%r: expected \"cpu\", \"cuda\" or \"cuda:N\"" % (device,))


def _shape_dtype(name, dtype, stored_shape, nbytes, ggml_type, fmt):
    """-> (shape row-major, safetensors-style dtype, raw: True for quantized
    GGUF blocks exported as uint8)"""
    if fmt != "gguf":
        return tuple(stored_shape), dtype, False
    # ggml's ne[0] is the innermost dimension: reversed, as gguf-py reads it
    shape = tuple(reversed(stored_shape))
    if dtype in _GGML_PLAIN:
        return shape, _GGML_PLAIN[dtype], False
    # quantized: the raw blocks, rows of ne[0] / block_size * type_size
    # bytes (gguf-py's shape); the byte count comes from the library
    outer = 1
    for d in shape[:-1]:
        outer *= d
    row = nbytes // outer if outer else 0
    return shape[:-1] + (row,), "U8", True


class _Info:
    __slots__ = ("index", "name", "dtype", "shape", "nbytes", "offset", "raw", "file_dtype", "ggml_type",
                 "stored_shape")

    def __init__(self, index, t, fmt):
        name, dtype, stored, off, nbytes, ggml = t
        self.index, self.name, self.offset, self.nbytes = index, name, off, nbytes
        self.file_dtype, self.ggml_type, self.stored_shape = dtype, ggml, tuple(stored)
        self.shape, self.dtype, self.raw = _shape_dtype(name, dtype, stored, nbytes, ggml, fmt)


def _wrap(exporter, info, fw):
    """a 1-D uint8 DLPack exporter -> a tensor of the info's dtype and shape"""
    if fw == "np":
        import numpy as np
        a = np.from_dlpack(exporter)
        npd = _NP.get(info.dtype) or _NP_RAW.get(info.dtype)
        if npd is None:
            # sub-byte types (F4, F6_*): bytes as stored
            return a
        return a.view(npd).reshape(info.shape)
    import torch
    t = torch.from_dlpack(exporter)
    tname = _TORCH.get(info.dtype)
    if tname is None or not hasattr(torch, tname):
        return t  # sub-byte types, or a torch too old for this float8: raw bytes
    return t.view(getattr(torch, tname)).reshape(info.shape)


def _real_dtype_name(info):
    return info.file_dtype if info.raw or info.dtype != info.file_dtype else info.dtype
