# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: the safetensors-compatible API: load_file, safe_open, load_pretrained."""
import copy
import posixpath

from . import _gpunvme
from ._gpunvme import Error, HAVE_CUDA
from ._parse import _SUB_BITS, _device, _framework, _tier, _wrap
from ._volumes import _done, _path, _shown, _volume
from ._loading import StateDict, _fill, _index, _load, _queue_opts, _select
from ._placement import PLACEMENTS, _devices, _load_multi


def _same_model(models, uris, shown):
    """replicas: every volume's model at the path is the first one's (the
    same tensors at the same offsets), or Error naming the first that is not"""
    ref = models[0].tensors()
    for k in range(1, len(models)):
        t = models[k].tensors()
        if t != ref:
            diff = next((i for i, (a, b) in enumerate(zip(ref, t)) if a != b), min(len(ref), len(t)))
            what = ("tensor %d: %r against %r" % (diff, t[diff][:5], ref[diff][:5]) if diff < min(len(ref), len(t))
                    else "%d tensors against %d" % (len(t), len(ref)))
            raise Error(22, "%s: the replica on volume %d (%s) differs from volume 0's (%s): %s; replicas must "
                        "hold the same model" % (shown, k, _uri_name(uris[k]), _uri_name(uris[0]), what))


def _uri_name(u):
    return u if isinstance(u, str) else "an open Volume"


def load_file(uri, path, device="cpu", framework="pt", tensors=None, tier=None, *, nsid=1, partition=None,
              offset=None, progress=False, queues=None, depth=None, placement="layers", split_dim=0):
    """Every tensor (or those named in `tensors`) of a safetensors or GGUF file
    -> StateDict {name: tensor}, like safetensors.torch.load_file.

    uri: a device URI ("emu:/path/ext4.img") or an open gpunvme.Volume.
    device: "cpu" (CPU data path), "cuda" / "cuda:N" (tier 2, GPU memory;
    tier=1: pinned host memory, CPU tensors). framework: "pt" or "numpy".
    queues, depth: I/O queue pairs and entries per queue (None: fit to the
    controller, up to 8 x 256; a multiple of the emulator's workers).
    device=["cuda:0", "cuda:1", ...]: several GPUs, each with its own loader
    and queues; placement= "layers" (contiguous transformer-block ranges,
    balanced by bytes; StateDict.placement names each tensor's device),
    "size" (round-robin by size, largest first onto the least-loaded GPU), or
    "split" (every tensor split along split_dim=0 into one shard per GPU, each
    GPU reading only its rows; returns one StateDict per device).
    uri=[uri0, uri1, ...] with device=[...] (as many): replicas, device k
    reading through volume k (each GPU fed by its own drive or controller,
    at the same time); every volume must hold the same model at `path`.
    """
    fw = _framework(framework)
    _queue_opts(queues, depth)
    replicas = isinstance(uri, (list, tuple))
    if replicas and not isinstance(device, (list, tuple)):
        raise Error(22, "uri=[...] (replicas, one volume per device) needs device=[...] with as many devices")
    if isinstance(device, (list, tuple)):
        if placement not in PLACEMENTS:
            raise Error(22, "placement=%r: expected one of %s" % (placement, ", ".join(repr(p) for p in PLACEMENTS)))
        devs = _devices(device, tier)
        uris = list(uri) if replicas else [uri]
        if replicas and len(uris) != len(devs):
            raise Error(22, "uri=[...] has %d volumes for %d devices: give one volume per device (replicas)"
                        % (len(uris), len(devs)))
        path = _path(path)
        opened = []
        ok = False
        try:
            for u in uris:
                opened.append(_volume(u, nsid, partition, offset))
            vols = [v for v, _ in opened]
            devs = [(_tier(vols[k if replicas else 0], t), idx, name) for k, (t, idx, name) in enumerate(devs)]
            models = [v.open_model(path) for v in vols]
            _same_model(models, uris, _shown(path))
            sel = _select(_index(models[0]), tensors, _shown(path))
            out = _load_multi(models if replicas else models[0], sel, devs, placement, split_dim, fw, progress,
                              posixpath.basename(_shown(path)), queues, depth)
            ok = True
            return out
        finally:
            for v, own in opened:
                _done(v, own, ok)
    t, devidx, _ = _device(device, tier)
    path = _path(path)
    vol, own = _volume(uri, nsid, partition, offset)
    ok = False
    try:
        t = _tier(vol, t)
        model = vol.open_model(path)
        infos = _index(model)
        sel = _select(infos, tensors, _shown(path))
        sd = StateDict()
        sd.metadata = model.metadata()
        _fill(sd, sel, _load(model, sel, t, devidx, fw, progress, posixpath.basename(_shown(path)), queues,
                             depth))
        ok = True
        return sd
    finally:
        # a volume opened from a URI string: closed, or kept a few seconds
        # for the next call (_volumes.py, GPUNVME_VOLUME_CACHE_S)
        _done(vol, own, ok)


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
            _done(self._vol, self._own, False)
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
        if self._vol is not None:
            _done(self._vol, self._own, True)
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
                    partition=None, offset=None, progress=False, queues=None, depth=None, placement="layers",
                    split_dim=0):
    """A Hugging Face model directory (model.safetensors.index.json and its
    shards, or one model.safetensors), its index file, a split GGUF's shard,
    or one model file -> one StateDict, ready for
    model.load_state_dict(sd, assign=True). Every shard is read by one loader
    in one pass (the library's model set: include/gpunvme/modelset.h).
    device=[...], placement=, split_dim=, uri=[...] (replicas): several GPUs,
    as for load_file."""
    return load_file(uri, model_dir, device=device, framework=framework, tensors=tensors, tier=tier, nsid=nsid,
                     partition=partition, offset=offset, progress=progress, queues=queues, depth=depth,
                     placement=placement, split_dim=split_dim)


def cuda_available():
    """True when the extension has the CUDA backend and a GPU is visible"""
    return bool(HAVE_CUDA) and _gpunvme.cuda_device_count() > 0
