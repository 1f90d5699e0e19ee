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
import copy
import os
import posixpath
import re
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

__all__ = ["Error", "TIER_AUTO", "Volume", "load_file", "safe_open", "load_pretrained", "StateDict", "HAVE_CUDA", "cuda_available",
           "stream", "LayerStream", "stream_decoder"]

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


# ---- the volume ---------------------------------------------------------------------


class Volume(_gpunvme.Volume):
    """An opened controller, namespace and file system.

    Volume(uri, nsid=1, partition=None, offset=None). uri: "emu:/path/ext4.img",
    "emu:ram:1G", "vfio:0000:01:00.0", ... The file system is found at byte 0
    of the namespace or, on a disk with a GPT or MBR partition table, in the
    one partition that holds one; partition=N picks partition N, offset= a
    byte offset. Many loads can share one volume.
    close() (or leaving a `with` block) stops new use; the controller is shut
    down when the last tensor loaded from it is gone.
    """

    def __init__(self, uri, nsid=1, partition=None, offset=None):
        if not isinstance(uri, str):
            raise TypeError("uri must be a str (e.g. \"emu:/path/ext4.img\"), not %s" % type(uri).__name__)
        if partition is not None and offset is not None:
            raise Error(22, "give partition= or offset=, not both")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                      or not 1 <= partition <= 0xffffffff):
            raise Error(22, "partition=%r: expected a partition number >= 1 (as Linux numbers them)"
                        % (partition,))
        if not isinstance(nsid, int) or nsid < 1 or nsid > 0xfffffffe:
            raise Error(22, "nsid=%r: expected a namespace id 1..4294967294" % (nsid,))
        if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int) or offset < 0):
            raise Error(22, "offset=%r: expected a byte offset >= 0" % (offset,))
        try:
            # the URI grammar is the library's (gpunvme_uri_check)
            super().__init__(uri, nsid, -1 if offset is None else offset, partition or 0)
        except Error as e:
            # a path given where a URI belongs: say how to name it
            if ":" not in uri and os.path.exists(uri) and e.args and e.args[0] == 22:
                raise Error(22, "%s (an image file: emu:%s)" % (e.args[-1], uri)) from None
            raise

    def __repr__(self):
        return "<gpunvme.Volume %s%s>" % (self.uri, " closed" if self.closed else "")

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except Error:
            return False


def _path(path, what="path"):
    """A path inside the volume: str, bytes or os.PathLike -> str or bytes.
    The extension encodes a str as os.fsencode does (surrogateescape), so a
    non-UTF-8 name that listdir() gave back ('caf\\udce9') finds its file."""
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError("%s must be a str, bytes or os.PathLike, not %s" % (what, type(path).__name__)) from None


def _shown(path):
    """a path for messages and progress labels: always a str"""
    return os.fsdecode(path)


def _volume(uri, nsid, partition, offset):
    """-> (volume, opened_here)"""
    if isinstance(uri, _gpunvme.Volume):
        if partition is not None or offset is not None or nsid != 1:
            raise Error(22, "nsid/partition/offset are the Volume's: give them to gpunvme.Volume()")
        return uri, False
    return Volume(uri, nsid=nsid, partition=partition, offset=offset), True


# ---- progress ---------------------------------------------------------------------------


class _Progress:
    def __init__(self, total, desc):
        self.bar = None
        self.last = 0
        self.total = total
        self.desc = desc
        try:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="B", unit_scale=True, desc=desc)
        except ImportError:
            pass

    def __call__(self, done, total):
        if self.bar is not None:
            self.bar.update(done - self.last)
        else:
            sys.stderr.write("\r%s: %.1f / %.1f MB (%3d%%)" % (self.desc, done / 1e6, total / 1e6,
                                                               100 * done // total if total else 100))
            sys.stderr.flush()
        self.last = done

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.last:
            sys.stderr.write("\n")


# ---- the state dict ------------------------------------------------------------------------


class StateDict(dict):
    """dict[name, tensor] with side tables:

    .dtypes: name -> the file's dtype name ("BF16", "F8_E4M3", "Q4_K", ...);
             for numpy the real dtype of tensors handed out as raw bits
    .ggml_types: name -> ggml type name (GGUF files only)
    .metadata: safetensors __metadata__ (dict) or None
    """

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.dtypes = {}
        self.ggml_types = {}
        self.metadata = None
        self.placement = {}  # several GPUs: name -> the device holding it


def _queue_opts(queues, depth):
    """queues=/depth=: None = fit to the controller (as gpunvme load does)"""
    out = []
    for name, v, lo, hi in (("queues", queues, 1, 64), ("depth", depth, 2, 4096)):
        if v is None:
            out.append(0)
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError("%s= takes an int, not %s" % (name, type(v).__name__))
        if not lo <= v <= hi:
            raise Error(22, "%s=%d: expected %d..%d (None: fit to the controller)" % (name, v, lo, hi))
        out.append(v)
    return out


def _load(model, infos, tier, devidx, fw, progress, desc, queues=None, depth=None):
    q, d = _queue_opts(queues, depth)
    loader = _gpunvme.Loader(model, tier, devidx, q, d)
    bufs = loader.select([i.index for i in infos])
    if progress:
        bar = _Progress(bufs.run_bytes, desc)
        try:
            bufs.load(bar)
        finally:
            bar.close()
    else:
        bufs.load()
    return [_wrap(_gpunvme.Tensor(bufs, k), info, fw) for k, info in enumerate(infos)]


def _select(infos, tensors, path):
    if tensors is None:
        return list(infos.values())
    if isinstance(tensors, str):
        tensors = [tensors]
    out = []
    seen = set()
    for name in tensors:
        if not isinstance(name, str):
            raise TypeError("tensors= takes tensor names (str), not %s" % type(name).__name__)
        if name not in infos:
            raise Error(2, "%s: no tensor named %r (%d tensors; names are exact, not patterns)"
                        % (path, name, len(infos)))
        if name not in seen:
            seen.add(name)
            out.append(infos[name])
    return out


def _index(model):
    fmt = model.format
    return {t[0]: _Info(i, t, fmt) for i, t in enumerate(model.tensors())}


def _fill(sd, infos, tensors):
    for info, t in zip(infos, tensors):
        sd[info.name] = t
        sd.dtypes[info.name] = info.file_dtype
        if info.ggml_type >= 0:
            sd.ggml_types[info.name] = info.file_dtype


# ---- several GPUs ---------------------------------------------------------------------------

PLACEMENTS = ("layers", "size", "split")
_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|blk|layer|block)\.(\d+)\.")


def _layer_of(name):
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def _place(infos, ndev, placement):
    """-> [device index per info] ("layers", "size") for infos in file order.

    layers: the transformer blocks (names with layers.N. / blk.N. / h.N. ...)
            in contiguous ranges, cut where the bytes so far pass k/ndev of
            the blocks' bytes; tensors before the first block (embeddings)
            on the first device, the others (final norm, lm_head) on the last.
    size:   largest tensor first onto the device with the fewest bytes so far
            (round-robin by size; ties to the lowest index)."""
    if ndev < 1:
        raise Error(22, "no devices")
    if placement == "size":
        load = [0] * ndev
        out = [0] * len(infos)
        for i in sorted(range(len(infos)), key=lambda i: (-infos[i].nbytes, i)):
            d = min(range(ndev), key=lambda k: (load[k], k))
            out[i] = d
            load[d] += infos[i].nbytes
        return out
    if placement == "layers":
        layers = sorted({l for l in (_layer_of(i.name) for i in infos) if l is not None})
        per = {}
        for i in infos:
            l = _layer_of(i.name)
            if l is not None:
                per[l] = per.get(l, 0) + i.nbytes
        total = sum(per.values())
        dev_of, acc = {}, 0
        for l in layers:
            # the device whose share the middle of this layer falls in
            mid = acc + per[l] / 2.0
            dev_of[l] = min(ndev - 1, int(mid * ndev / total)) if total else 0
            acc += per[l]
        # file position of the first block's first tensor: what precedes it
        # (embeddings) goes with the first blocks, what follows with the last
        first_pos = min((k for k, i in enumerate(infos) if _layer_of(i.name) is not None), default=None)
        out = []
        for k, i in enumerate(infos):
            l = _layer_of(i.name)
            if l is not None:
                out.append(dev_of[l])
            elif first_pos is not None and k < first_pos:
                out.append(0)
            else:
                out.append(ndev - 1 if layers else 0)
        return out
    raise Error(22, "placement=%r: expected one of %s" % (placement, ", ".join(repr(p) for p in PLACEMENTS)))


def _split_rows(info, ndev):
    """split: [(first row, rows)] per device along dimension 0 (rows are
    contiguous in the file, so each GPU reads only its own rows); a tensor
    with fewer rows than devices, no dimensions or rows of sub-byte types
    goes whole to every device."""
    n = info.shape[0] if info.shape else 0
    if n < ndev or info.nbytes % n or (info.dtype not in _NP and info.dtype not in _NP_RAW):
        return None
    return [(k * n // ndev, (k + 1) * n // ndev - k * n // ndev) for k in range(ndev)]


def _devices(device, tier):
    """device=[...] -> [(tier, cuda index, name)], distinct GPUs"""
    if not device:
        raise Error(22, "device=[]: give at least one device")
    out = [_device(d, tier) for d in device]
    names = [o[2] for o in out]
    if len(set(names)) != len(names):
        raise Error(22, "device=%r: a device is listed twice" % (list(device),))
    if any(o[2] == "cpu" for o in out) and len(out) > 1:
        raise Error(22, "device=%r: several devices are GPUs (\"cuda:N\"); \"cpu\" is one device" % (list(device),))
    return out


def _load_multi(model, sel, devs, placement, split_dim, fw, progress, desc, queues, depth):
    """sel loaded onto several devices, each device its own Loader (its own
    queues on every controller of the volume), no tensor staged on another
    GPU first. -> StateDict (layers, size) or [StateDict per device] (split)."""
    if placement == "split":
        if split_dim != 0:
            raise Error(95, "split_dim=%r: only dimension 0 (rows, contiguous in the file) is split so far"
                        % (split_dim,))
        q, d = _queue_opts(queues, depth)
        out = []
        for t, idx, _ in devs:
            sd = StateDict()
            sd.metadata = model.metadata()
            out.append(sd)
        loaders = [_gpunvme.Loader(model, t, idx, q, d) for t, idx, _ in devs]
        for info in sel:
            rows = _split_rows(info, len(devs))
            for k, ld in enumerate(loaders):
                if rows is None or not info.nbytes:
                    # a tensor of zero bytes has nothing to read (and
                    # select_bytes takes no empty part): its shard is a
                    # slice of the empty whole
                    bufs = ld.select([info.index])
                    bufs.load()
                    t = _wrap(_gpunvme.Tensor(bufs, 0), info, fw)
                    if rows is not None:
                        t = t[rows[k][0]:rows[k][0] + rows[k][1]]
                else:
                    first, count = rows[k]
                    row = info.nbytes // info.shape[0]
                    bufs = ld.select_bytes(info.index, first * row, count * row)
                    bufs.load()
                    part = copy.copy(info)
                    part.shape = (count,) + tuple(info.shape[1:])
                    part.nbytes = count * row
                    t = _wrap(_gpunvme.Tensor(bufs, 0), part, fw)
                out[k][info.name] = t
                out[k].dtypes[info.name] = info.file_dtype
                if info.ggml_type >= 0:
                    out[k].ggml_types[info.name] = info.file_dtype
        return out
    where = _place(sel, len(devs), placement)
    sd = StateDict()
    sd.metadata = model.metadata()
    got = {}
    for k, (t, idx, name) in enumerate(devs):
        mine = [info for info, w in zip(sel, where) if w == k]
        if mine:
            for info, ten in zip(mine, _load(model, mine, t, idx, fw, progress, "%s -> %s" % (desc, name),
                                              queues, depth)):
                got[info.name] = ten
    # the file's order, as load_file with one device
    _fill(sd, sel, [got[i.name] for i in sel])
    sd.placement = {i.name: devs[w][2] for i, w in zip(sel, where)}
    return sd


def load_file(uri, path, device="cpu", framework="pt", tensors=None, tier=None, *, nsid=1, partition=None,
              offset=None, progress=False, queues=None, depth=None, placement="layers", split_dim=0):
    """Every tensor (or those named in `tensors`) of a safetensors or GGUF file
    -> StateDict {name: tensor}, like safetensors.torch.load_file.

    uri: a device URI ("emu:/path/ext4.img") or an open gpunvme.Volume.
    device: "cpu" (CPU data path), "cuda" / "cuda:N" (tier 2, GPU memory;
    tier=1: pinned host memory, CPU tensors). framework: "pt" or "numpy".
    queues, depth: I/O queue pairs and entries per queue (None: fit to the
    controller, up to 8 x 256).
    device=["cuda:0", "cuda:1", ...]: several GPUs, each with its own loader
    and queues; placement= "layers" (contiguous transformer-block ranges,
    balanced by bytes; StateDict.placement names each tensor's device),
    "size" (round-robin by size, largest first onto the least-loaded GPU), or
    "split" (every tensor split along split_dim=0 into one shard per GPU, each
    GPU reading only its rows; returns one StateDict per device).
    """
    fw = _framework(framework)
    _queue_opts(queues, depth)
    if isinstance(device, (list, tuple)):
        if placement not in PLACEMENTS:
            raise Error(22, "placement=%r: expected one of %s" % (placement, ", ".join(repr(p) for p in PLACEMENTS)))
        devs = _devices(device, tier)
        path = _path(path)
        vol, own = _volume(uri, nsid, partition, offset)
        try:
            devs = [(_tier(vol, t), idx, name) for t, idx, name in devs]
            model = vol.open_model(path)
            sel = _select(_index(model), tensors, _shown(path))
            return _load_multi(model, sel, devs, placement, split_dim, fw, progress, posixpath.basename(_shown(path)),
                               queues, depth)
        finally:
            if own:
                vol.close()
    t, devidx, _ = _device(device, tier)
    path = _path(path)
    vol, own = _volume(uri, nsid, partition, offset)
    try:
        t = _tier(vol, t)
        model = vol.open_model(path)
        infos = _index(model)
        sel = _select(infos, tensors, _shown(path))
        sd = StateDict()
        sd.metadata = model.metadata()
        _fill(sd, sel, _load(model, sel, t, devidx, fw, progress, posixpath.basename(_shown(path)), queues,
                             depth))
        return sd
    finally:
        if own:
            vol.close()


# ---- safe_open --------------------------------------------------------------------------------


class _Slice:
    """get_slice(name): shape and dtype without loading. Indexing reads only
    what it needs when the first index is an int or a slice with step 1 over
    the outermost dimension (the rows are contiguous in the file: how
    tensor-parallel loaders shard dim 0); any other index reads the whole
    tensor and slices a copy of it. Sub-byte dtypes: _packed."""

    def __init__(self, f, info):
        self._f, self._info = f, info

    def get_shape(self):
        return list(self._info.shape)

    def get_dtype(self):
        return self._info.file_dtype if self._info.ggml_type < 0 else self._info.dtype

    def _rows(self, idx):
        """-> (first row, row count, the index to apply to those rows) or None"""
        info = self._info
        # zero bytes (a (4, 0) tensor): nothing to read, and select_bytes
        # refuses an empty part; the whole-tensor path gives numpy's result
        if not info.shape or info.shape[0] == 0 or not info.nbytes or info.nbytes % info.shape[0]:
            return None
        first, rest = idx[0], idx[1:]
        if Ellipsis in rest:
            return None
        n = info.shape[0]
        if isinstance(first, slice):
            start, stop, step = first.indices(n)
            if step != 1 or stop <= start:
                return None
            return start, stop - start, (slice(None),) + rest
        if isinstance(first, int) and not isinstance(first, bool):
            k = first + n if first < 0 else first
            if not 0 <= k < n:
                raise IndexError("index %d is out of bounds for dimension 0 with size %d" % (first, n))
            return k, 1, (0,) + rest
        return None

    def _packed(self, idx):
        """Sub-byte dtypes (F4, F6_*) come back as their packed bytes, so an
        index selects bytes: those of the elements it names, in row-major
        order, as the safetensors reference slices them (slice.rs). Only ints
        and step-1 slices, and every piece must start and end on a byte
        boundary (whole rows of F4 [4, 6] do: 3 bytes each; a row of F6 [4, 6],
        36 bits, does not); else gpunvme.Error, as the reference refuses it
        (InvalidSlice::MisalignedSlice) rather than return bits of other
        elements."""
        info = self._info
        bits, shape = _SUB_BITS[info.dtype], tuple(info.shape)
        what = "get_slice(%r)[%s] of a %s tensor of shape %s" % (info.name, ", ".join(map(repr, idx)), info.dtype,
                                                                  list(shape))
        if Ellipsis in idx:
            k = idx.index(Ellipsis)
            if Ellipsis in idx[k + 1:]:
                raise IndexError("an index can only have a single ellipsis ('...')")
            idx = idx[:k] + (slice(None),) * max(0, len(shape) - len(idx) + 1) + idx[k + 1:]
        if len(idx) > len(shape):
            raise IndexError("too many indices: %d for a tensor of %d dimensions" % (len(idx), len(shape)))
        ranges = []
        for d, k in enumerate(idx):
            n = shape[d]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step != 1:
                    raise Error(22, "%s: %s packs %d bits per element and comes back as packed bytes, so only "
                                    "step-1 slices can be cut from it; load it with get_tensor() and unpack it"
                                % (what, info.dtype, bits))
                ranges.append((start, max(start, stop)))
            elif isinstance(k, int) and not isinstance(k, bool):
                j = k + n if k < 0 else k
                if not 0 <= j < n:
                    raise IndexError("index %d is out of bounds for dimension %d with size %d" % (k, d, n))
                ranges.append((j, j + 1))
            else:
                raise Error(95, "%s: %s comes back as packed bytes; its slices take ints and step-1 slices "
                                "only, not %r" % (what, info.dtype, k))
        ranges += [(0, n) for n in shape[len(ranges):]]
        # the reference's walk, in bits: innermost dimension first, each
        # narrowed dimension repeats the pieces found inside it
        span, pieces = bits, None
        for d in reversed(range(len(shape))):
            start, stop = ranges[d]
            if pieces is None:
                if (start, stop) != (0, shape[d]):
                    pieces = [(start * span, stop * span)]
            else:
                pieces = [(a + i * span, b + i * span) for i in range(start, stop) for a, b in pieces]
            span *= shape[d]
        if pieces is None:
            pieces = [(0, span)]
        pieces = [(a, b) for a, b in pieces if b > a]
        for a, b in pieces:
            if a % 8 or b % 8:
                raise Error(22, "%s: %s packs %d bits per element and comes back as packed bytes; this slice "
                                "starts or ends inside a byte (bits %d..%d), which the safetensors reference "
                                "refuses too (MisalignedSlice): slice whole bytes (e.g. whole rows whose bits "
                                "are a multiple of 8), or get_tensor() and unpack the bits"
                            % (what, info.dtype, bits, a, b))
        merged = []
        for a, b in pieces:
            if merged and merged[-1][1] == a // 8:
                merged[-1] = (merged[-1][0], b // 8)
            else:
                merged.append((a // 8, b // 8))
        return merged

    def _get_packed(self, idx):
        f, info = self._f, self._info
        pieces = self._packed(idx)
        if not pieces:
            if f._fw == "np":
                import numpy as np
                return np.empty(0, np.uint8)
            import torch
            # Tier 2 tensors live on the GPU, the others in host memory
            return torch.empty(0, dtype=torch.uint8, device=f._device if f._tier == 2 else "cpu")
        lo, hi = pieces[0][0], pieces[-1][1]
        # only the bytes from the first piece to the last are read
        if f._loader is None:
            f._loader = _gpunvme.Loader(f._model, f._tier, f._devidx)
        bufs = f._loader.select_bytes(info.index, lo, hi - lo)
        bufs.load()
        part = copy.copy(info)
        part.shape, part.nbytes = (hi - lo,), hi - lo
        t = _wrap(_gpunvme.Tensor(bufs, 0), part, f._fw)
        if len(pieces) == 1:
            return t
        parts = [t[a - lo:b - lo] for a, b in pieces]
        if f._fw == "np":
            import numpy as np
            return np.concatenate(parts)
        import torch
        return torch.cat(parts)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if self._info.dtype in _SUB_BITS:
            self._f._check()
            return self._get_packed(idx)
        rows = self._rows(idx) if idx else None
        if rows is None:
            t = self._f.get_tensor(self._info.name)
            r = t[idx]
            # a copy, so the slice does not keep the whole tensor's memory
            return r.copy() if self._f._fw == "np" else r.clone()
        start, count, rest = rows
        part = self._f._get_rows(self._info, start, count)
        return part[rest]

    def __len__(self):
        return self._info.shape[0] if self._info.shape else 0


class safe_open:
    """safe_open(uri, path, framework="pt", device="cpu", *, tier=None, nsid=1,
    partition=None, offset=None): lazy access to one model file, as
    safetensors.safe_open. Each get_tensor() reads that tensor."""

    def __init__(self, uri, path, framework="pt", device="cpu", *, tier=None, nsid=1, partition=None, offset=None):
        self._fw = _framework(framework)
        self._tier, self._devidx, self._device = _device(device, tier)
        path = _path(path)
        self._vol, self._own = _volume(uri, nsid, partition, offset)
        try:
            self._tier = _tier(self._vol, self._tier)
            self._model = self._vol.open_model(path)
        except BaseException:
            if self._own:
                self._vol.close()
            raise
        self._path = _shown(path)
        self._infos = _index(self._model)
        self._loader = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._loader = None
        self._model = None
        if self._own and self._vol is not None:
            self._vol.close()
        self._vol = None

    def _check(self):
        if self._model is None:
            raise Error(9, "%s: this safe_open is closed" % self._path)

    def keys(self):
        self._check()
        return list(self._infos)

    def metadata(self):
        self._check()
        return self._model.metadata()

    def ggml_types(self):
        """name -> ggml type name (GGUF; {} for safetensors)"""
        self._check()
        return {n: i.file_dtype for n, i in self._infos.items() if i.ggml_type >= 0}

    def dtypes(self):
        """name -> the file's dtype name (the real dtype of raw-bits numpy tensors)"""
        self._check()
        return {n: i.file_dtype for n, i in self._infos.items()}

    def _info(self, name):
        self._check()
        if not isinstance(name, str):
            raise TypeError("tensor names are str, not %s" % type(name).__name__)
        try:
            return self._infos[name]
        except KeyError:
            raise Error(2, "%s: no tensor named %r (%d tensors)" % (self._path, name, len(self._infos))) from None

    def get_tensor(self, name):
        info = self._info(name)
        if self._loader is None:
            # one loader for this file, reused by every get_tensor
            self._loader = _gpunvme.Loader(self._model, self._tier, self._devidx)
        bufs = self._loader.select([info.index])
        bufs.load()
        return _wrap(_gpunvme.Tensor(bufs, 0), info, self._fw)

    def _get_rows(self, info, start, count):
        """rows [start, start + count) of the outermost dimension, read alone"""
        if self._loader is None:
            self._loader = _gpunvme.Loader(self._model, self._tier, self._devidx)
        row = info.nbytes // info.shape[0]
        bufs = self._loader.select_bytes(info.index, start * row, count * row)
        bufs.load()
        part = copy.copy(info)
        part.shape = (count,) + tuple(info.shape[1:])
        part.nbytes = count * row
        return _wrap(_gpunvme.Tensor(bufs, 0), part, self._fw)

    def get_slice(self, name):
        return _Slice(self, self._info(name))


# ---- Hugging Face directories ---------------------------------------------------------------------


def load_pretrained(uri, model_dir, device="cpu", framework="pt", tensors=None, tier=None, *, nsid=1,
                    partition=None, offset=None, progress=False, queues=None, depth=None):
    """A Hugging Face model directory (model.safetensors.index.json and its
    shards, or one model.safetensors), its index file, a split GGUF's shard,
    or one model file -> one StateDict, ready for
    model.load_state_dict(sd, assign=True). Every shard is read by one loader
    in one pass (the library's model set: include/gpunvme/modelset.h)."""
    return load_file(uri, model_dir, device=device, framework=framework, tensors=tensors, tier=tier, nsid=nsid,
                     partition=partition, offset=offset, progress=progress, queues=queues, depth=depth)


def cuda_available():
    """True when the extension has the CUDA backend and a GPU is visible"""
    return bool(HAVE_CUDA) and _gpunvme.cuda_device_count() > 0


# ---- layer streaming -------------------------------------------------------------------------


def _cuda_stream_ptr(dev, fw):
    """the current torch CUDA stream of dev as an int (0: the default stream)"""
    if fw != "pt" or not dev.startswith("cuda"):
        return 0
    import torch
    return torch.cuda.current_stream(torch.device(dev)).cuda_stream


class LayerStream:
    """A model bigger than GPU memory, one layer at a time (the library's
    layer stream: include/gpunvme/stream.h). Layers are the tensors whose
    names start with `layers` with {i} replaced by the layer number; the
    others (or those matching the `resident` patterns) are loaded once:
    .resident. A window of `window` slots, each the size of the largest
    layer, holds layer i while layers i+1..i+window-1 are read.

    Iterating yields (i, {name: tensor}) for i = 0..n_layers-1 (one pass;
    iterate again for the next). The tensors of a step are valid until the
    next step: then the slot is released on the current CUDA stream and the
    read of a later layer into it is queued behind the work queued so far.
    acquire(i) / release(i) do the same by hand. device="cpu" reads through
    the CPU data path (no GPU; no read-ahead: each acquire reads its layer).
    On Tier 1 (.tier == 1) the tensors are pinned host memory: GPU work on
    the current stream (e.g. .to("cuda", non_blocking=True)) is ordered
    after the reads; the CPU must synchronize that stream before it reads
    them itself.

    A failed read on the GPU raises gpunvme.Error, but the GPU may have run
    the consumer's work first (nothing waits on the host): that layer and
    every later one reach it with all bytes 0xff (NaN in floating types),
    never as a mix of old and new bytes; the error comes from the next
    acquire or release, from check(i), and at the end of each pass of the
    iterator (it checks the pass's last layer, so that a pass that yields
    to its end read every layer). A failed stream stays failed: close it.
    """

    def __init__(self, uri, model_dir, layers="model.layers.{i}.", window=2, device="cuda", resident=None,
                 framework="pt", tier=None, *, nsid=1, partition=None, offset=None, queues=None, depth=None,
                 no_fallback=False, sync_reads=False):
        self._fw = _framework(framework)
        q, d = _queue_opts(queues, depth)
        t, devidx, self.device = _device(device, tier)
        if not isinstance(layers, str):
            raise TypeError("layers= takes a pattern str with {i} (e.g. \"model.layers.{i}.\"), not %s"
                            % type(layers).__name__)
        if resident is not None and not isinstance(resident, str):
            raise TypeError("resident= takes patterns (str, comma-separated) or None, not %s"
                            % type(resident).__name__)
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError("window= takes an int, not %s" % type(window).__name__)
        if not 1 <= window <= 0xffffffff:
            raise Error(22, "window=%d: the stream needs at least 1 slot (2 to read ahead)" % window)
        model_dir = _path(model_dir, "model_dir")
        self.layers_pattern = layers
        vol, own = _volume(uri, nsid, partition, offset)
        try:
            t = _tier(vol, t)
            model = vol.open_model(model_dir)
            self._infos = [_Info(i, x, model.format) for i, x in enumerate(model.tensors())]
            self._s = _gpunvme.Stream(model, layers, resident, window, t, devidx, q, d, bool(no_fallback),
                                      bool(sync_reads))
        finally:
            if own:
                vol.close()  # the stream keeps the controller through its model
        self.tier = self._s.tier
        self.n_layers = self._s.n_layers
        self.resident = StateDict()
        self._fill(self.resident, self._s.resident())
        self._held = set()

    def _fill(self, out, views):
        for idx, v in views:
            info = self._infos[idx]
            out[info.name] = _wrap(v, info, self._fw)
            out.dtypes[info.name] = info.file_dtype
        return out

    def __len__(self):
        return self.n_layers

    def acquire(self, i):
        """layer i -> StateDict {name: tensor}, ordered on the current CUDA stream"""
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError("layer index must be an int, not %s" % type(i).__name__)
        if not 0 <= i < self.n_layers:
            raise Error(34, "layer %d: the model has layers 0..%d" % (i, self.n_layers - 1))
        views = self._s.acquire(i, _cuda_stream_ptr(self.device, self._fw))
        self._held.add(i)
        return self._fill(StateDict(), views)

    def release(self, i):
        """done with layer i: its slot is refilled after the current CUDA stream's queued work"""
        self._s.release(i, _cuda_stream_ptr(self.device, self._fw))
        self._held.discard(i)

    def check(self, i=None):
        """wait for the reads of layer i (default: the last layer) and raise
        gpunvme.Error if any read so far failed; the next pass's read-ahead
        is not waited for"""
        self._s.check(self.n_layers - 1 if i is None else i)

    def __iter__(self):
        for i in range(self.n_layers):
            layer = self.acquire(i)
            try:
                yield i, layer
            finally:
                del layer
                self.release(i)
        self.check(self.n_layers - 1)

    def stats(self):
        """dict: tier, layers, window, slot_bytes, memory_bytes (slots + resident,
        the tier's memory the stream holds), bounce_bytes, resident_bytes,
        layer_loads, bytes_read, acquires, restarts, io_ms, stall_ms, overlap"""
        return self._s.stats()

    def close(self):
        """drop the stream; its memory goes with the last tensor over it"""
        self.resident = None
        self._s = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def stream(uri, model_dir, layers="model.layers.{i}.", window=2, device="cuda", **kw):
    """LayerStream(uri, model_dir, layers, window, device, ...): iterate it for
    (i, {name: tensor}), each layer valid until the next step."""
    return LayerStream(uri, model_dir, layers=layers, window=window, device=device, **kw)


def _rebuild_rotary(model, module_name, module, dev):
    """A rotary embedding's inv_freq is a non-persistent buffer (not in the
    checkpoint): built again on the device from the model's config."""
    parent = model.get_submodule(module_name.rsplit(".", 1)[0]) if "." in module_name else model
    leaf = module_name.rsplit(".", 1)[-1]
    import torch
    with torch.device(dev):  # its buffers are made on dev (the device= argument is deprecated)
        setattr(parent, leaf, type(module)(config=model.config))


def stream_decoder(model, uri, model_dir, layers="model.layers.{i}.", window=2, device="cuda", **kw):
    """Run a Hugging Face decoder (Llama architecture and alike) with its
    decoder layers streamed: every tensor outside the layers is loaded once
    into the model (load_state_dict(assign=True)); each decoder layer gets
    its weights from the stream in a forward pre-hook and gives its slot
    back in a forward hook (stream-ordered: no host wait). Build the model
    on the meta device (`with torch.device("meta"): Model(config)`) so that
    no memory is spent on the layers; rotary embeddings are rebuilt on the
    device. A failed read raises gpunvme.Error from the forward, at its last
    layer at the latest (before the output is returned). Returns the
    LayerStream (stats(), close()); the model keeps it as
    model._gpunvme_stream."""
    import torch
    s = LayerStream(uri, model_dir, layers=layers, window=window, device=device, **kw)
    dev = torch.device(s.device)
    # Tier 1 (the policy's choice where the volume cannot DMA into GPU memory) gives CPU
    # tensors in pinned memory: copied on the current stream, in order
    copy = s.tier == 1
    prefix = layers.split("{i}")[0]
    container = model.get_submodule(prefix.rstrip("."))
    if len(container) != s.n_layers:
        raise Error(22, "%s: the model has %d decoder layers under %r, the checkpoint %d"
                    % (model_dir, len(container), prefix.rstrip("."), s.n_layers))
    res = {k: (v.to(dev) if copy else v) for k, v in s.resident.items()}
    missing, unexpected = model.load_state_dict(res, strict=False, assign=True)
    if unexpected:
        raise Error(22, "%s: tensors the model does not have: %s" % (model_dir, ", ".join(sorted(unexpected)[:5])))
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
        model.tie_weights()
    for name, mod in list(model.named_modules()):
        if name.startswith(prefix) or not type(mod).__name__.endswith("RotaryEmbedding"):
            continue
        if any(b.device != dev for b in mod.buffers(recurse=False)):
            _rebuild_rotary(model, name, mod, dev)
    # everything outside the layers must now be on the device
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not name.startswith(prefix) and t.device != dev:
            raise Error(22, "%s: %s is on %s, not in the checkpoint's resident tensors (it would not be on %s)"
                        % (model_dir, name, t.device, dev))
    targets = {}

    def target(i, mod, name):
        key = (i, name)
        if key not in targets:
            rel = name[len(prefix) + len(str(i)) + 1:] if name.startswith(prefix) else name
            path, _, leaf = rel.rpartition(".")
            sub = mod.get_submodule(path) if path else mod
            if leaf not in sub._parameters and leaf not in sub._buffers:
                raise Error(22, "%s: layer tensor %s has no place in %s" % (model_dir, name, type(mod).__name__))
            targets[key] = (sub, leaf)
        return targets[key]

    # Tier 1: one set of GPU buffers per window slot, kept for the whole run
    # and refilled in stream order (layer i uses set i % window, whose last
    # user, layer i - window, ran earlier on the same stream). A fresh
    # allocation per layer made torch's allocator, capped by a budget, give
    # memory back with cudaFree, which waits for the whole device, read
    # kernels included: every layer's reads then stopped the consumer.
    gbufs = [{} for _ in range(s.stats()["window"])] if copy else None

    def gpu_copy(i, rel, t):
        bufs = gbufs[i % len(gbufs)]
        b = bufs.get(rel)
        if b is None or b.shape != t.shape or b.dtype != t.dtype:
            b = bufs[rel] = torch.empty(t.shape, dtype=t.dtype, device=dev)
        return b.copy_(t, non_blocking=True)

    def pre(i):
        def hook(mod, args, kwargs=None):
            for name, t in s.acquire(i).items():
                sub, leaf = target(i, mod, name)
                if copy:
                    t = gpu_copy(i, name[len(prefix) + len(str(i)) + 1:], t)
                if leaf in sub._parameters:
                    sub._parameters[leaf] = torch.nn.Parameter(t, requires_grad=False)
                else:
                    sub._buffers[leaf] = t
        return hook

    last = s.n_layers - 1

    def post(i):
        def hook(mod, args, out):
            s.release(i)
            if i == last:
                # every layer's reads of this pass done and good before the
                # model's output is used (a failed one was poisoned: NaN);
                # the host waits for the last layer's reads only, which the
                # GPU work queued so far waits for too
                s.check(i)
            if copy:
                # Tier 1: the layer lets go of its GPU buffers (they are the
                # next layer of its set's); kept, the module would hold them
                for (li, _), (sub, leaf) in targets.items():
                    if li == i:
                        if leaf in sub._parameters:
                            sub._parameters[leaf] = None
                        else:
                            sub._buffers[leaf] = None
        return hook

    for i, mod in enumerate(container):
        mod.register_forward_pre_hook(pre(i))
        mod.register_forward_hook(post(i))
    model._gpunvme_stream = s
    return s
