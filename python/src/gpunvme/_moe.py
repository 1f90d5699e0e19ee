# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: ExpertCache: a mixture-of-experts model's experts read on demand (moe.h).

The expert index finds each expert's bytes from tensor names and shapes
(one tensor per expert as Mixtral and Qwen-MoE checkpoints hold them, or one
tensor per projection with the experts stacked along the outermost
dimension, and llama.cpp's GGUF "_exps" tensors); the cache keeps `slots`
experts and reads the ones asked for that are not there, through the
volume (image, partition, md array, NVMe/TCP). This is the CPU tier: the
GPU expert cache (GPU threads reading the experts a router picked) is the
C API's gpunvme_gpu_experts_* (docs/moe.md).
"""
from . import _gpunvme
from ._gpunvme import Error
from ._parse import _NP, _NP_RAW, _TORCH, _framework, _shape_dtype
from ._volumes import _path, _volume


class ExpertCache:
    """ExpertCache(uri, path, slots, framework="np", nsid=1, partition=None, offset=None)

    uri: a device URI ("emu:/path/ext4.img") or an open gpunvme.Volume;
    path: the model in its file system (a safetensors or GGUF file, a Hugging
    Face directory or index, a split GGUF shard).
    Attributes: layout ("per-expert" or "stacked"), layers (the model's
    layer numbers that have experts), n_experts, projections (names, in the
    order get() returns them), max_expert_bytes.
    get(layer, ids) -> one {projection: array} per id (numpy, or torch with
    framework="pt"; CPU memory, copies: later gets do not change them).
    stats() -> requests, hits, misses, evictions, bytes_read, slots.
    close() / with: the volume opened from a URI is closed.
    """

    def __init__(self, uri, path, slots, framework="np", *, nsid=1, partition=None, offset=None):
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 0xffffffff:
            raise Error(22, "slots=%r: expected the number of experts to keep, >= 1" % (slots,))
        self._fw = _framework(framework)
        vol, own = _volume(uri, nsid, partition, offset)
        try:
            model = vol.open_model(_path(path))
            self._x = _gpunvme.Experts(model, slots)
        except BaseException:
            if own:
                vol.close()
            raise
        # a volume opened here is the cache's: close() (or the end of a
        # `with` block) closes it; a Volume given stays the caller's
        self._vol = vol if own else None
        idx = self._x.index()
        self.layout = idx["layout"]
        self.layers = list(idx["layers"])
        self.n_experts = idx["n_experts"]
        self.projections = list(idx["projections"])
        self.max_expert_bytes = idx["max_expert_bytes"]
        self._tensors = model.tensors()
        self._gguf = model.format == "gguf"
        self._shapes = {}

    def _shape(self, layer, expert, p, tensor, nbytes):
        """(dtype, shape) of one projection of one expert"""
        key = (tensor, nbytes)
        if key not in self._shapes:
            name, dtype, stored, _off, tbytes, ggml = self._tensors[tensor]
            stored = tuple(stored)
            if self.layout == "stacked":
                # the expert dimension goes: safetensors' first, GGUF's last (ne order)
                stored = stored[:-1] if self._gguf else stored[1:]
            shape, dt, _raw = _shape_dtype(name, dtype, stored, nbytes, ggml, "gguf" if self._gguf else "safetensors")
            self._shapes[key] = (dt, shape)
        return self._shapes[key]

    def _array(self, b, dt, shape):
        if self._fw == "np":
            import numpy as np
            npd = _NP.get(dt) or _NP_RAW.get(dt)
            a = np.frombuffer(b, dtype=np.uint8)
            return a if npd is None else a.view(npd).reshape(shape)
        import torch
        t = torch.frombuffer(bytearray(b), dtype=torch.uint8)
        tname = _TORCH.get(dt)
        if tname is None or not hasattr(torch, tname):
            return t
        return t.view(getattr(torch, tname)).reshape(shape)

    def get(self, layer, ids):
        """the experts ids of the model's layer `layer` -> [{projection: array}]"""
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise Error(22, "layer=%r: expected a layer number" % (layer,))
        ids = list(ids)
        for e in ids:
            if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < self.n_experts:
                raise Error(22, "expert %r: expected 0..%d" % (e, self.n_experts - 1))
        got = self._x.get(layer, ids)
        out = []
        for e, parts in zip(ids, got):
            pieces = self._x.pieces(layer, e)
            d = {}
            for p, (b, (tensor, _off, nbytes)) in enumerate(zip(parts, pieces)):
                dt, shape = self._shape(layer, e, p, tensor, nbytes)
                d[self.projections[p]] = self._array(b, dt, shape)
            out.append(d)
        return out

    def pieces(self, layer, expert):
        """[(tensor_name, offset, nbytes)] of one expert, in projection order"""
        return [(self._tensors[t][0], off, n) for t, off, n in self._x.pieces(layer, expert)]

    def stats(self):
        return self._x.stats()

    def close(self):
        """stop use; the volume opened here goes with the cache's last reference"""
        if self._vol is not None:
            self._vol.close()
            self._vol = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
