# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: ExpertCache: a mixture-of-experts model's experts read on demand (moe.h).

The expert index finds each expert's bytes from tensor names and shapes
(one tensor per expert as Mixtral and Qwen-MoE checkpoints hold them, or one
tensor per projection with the experts stacked along the outermost
dimension, and llama.cpp's GGUF "_exps" tensors); the cache keeps `slots`
experts and reads the ones asked for that are not there, through the
volume (image, partition, md array, NVMe/TCP). On the CPU (device="cpu")
CPU threads read them; with device="cuda" GPU threads read the experts a
router picked, with no host wait (the C API's gpunvme_gpu_experts_*,
docs/moe.md).
"""
from . import _gpunvme
from ._gpunvme import Error
from ._parse import _NP, _NP_RAW, _TORCH, _device, _framework, _shape_dtype
from ._volumes import _path, _volume


class ExpertCache:
    """ExpertCache(uri, path, slots, framework="np", device="cpu", tier=None, nsid=1, partition=None, offset=None)

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

    device="cuda[:N]" (framework "pt"): the GPU expert cache, its slots in
    GPU memory (tier 2: the volume's controllers DMA into GPU memory) or in
    pinned host memory that kernels read in place (tier 1); tier=None picks
    as every entry point does (2 where the controllers can, else 1), and
    the attribute `tier` says which.
    fetch(layer, ids) takes the router's ids as a CUDA int32 tensor and
    returns their slots (a CUDA int32 tensor, -1 as uint32 for an expert
    that could not be read), queued on the current CUDA stream with no host
    wait; weights(layer) -> {projection: tensor [slots, ...]} views of the
    slot memory (w[slots] picks the chosen experts); sync() waits for the
    stream and raises a failed read (stats as the CPU cache's, plus
    "commands", "stalled": the fetches that read, and "stall_s": their
    time from decide to publish, which compute queued behind them on the
    stream waited). Blocking CUDA calls on the host (.cpu(), .item()) behind a
    fetch are fine on the emulator too: from Python its copies run in a
    process of their own (docs/emulator.md).
    """

    def __init__(self, uri, path, slots, framework="np", device="cpu", *, tier=None, nsid=1, partition=None,
                 offset=None):
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 0xffffffff:
            raise Error(22, "slots=%r: expected the number of experts to keep, >= 1" % (slots,))
        self._fw = _framework(framework)
        tier, self._dev, self.device = _device(device, tier)
        if tier != 0 and self._fw != "pt":
            raise Error(22, "device=%r: the GPU expert cache hands out torch tensors: framework=\"pt\""
                        % (device,))
        self._gpu = tier != 0
        vol, own = _volume(uri, nsid, partition, offset)
        try:
            model = vol.open_model(_path(path))
            # tier -1 (TIER_AUTO): the library's policy picks, as for gpunvme
            # load and the stream; a tier the volume cannot do is refused
            # with the reason and the tier to use
            self._x = _gpunvme.Experts(model, slots, tier, self._dev)
        except BaseException:
            if own:
                vol.close()
            raise
        # a volume opened here is the cache's: close() (or the end of a
        # `with` block) closes it; a Volume given stays the caller's
        self._vol = vol if own else None
        self.tier = self._x.tier()
        idx = self._x.index()
        self.layout = idx["layout"]
        self.layers = list(idx["layers"])
        self.n_experts = idx["n_experts"]
        self.projections = list(idx["projections"])
        self.max_expert_bytes = idx["max_expert_bytes"]
        self._tensors = model.tensors()
        self._gguf = model.format == "gguf"
        self._shapes = {}

    def _shape(self, tensor, nbytes):
        """(dtype, shape) of one expert's piece of `tensor` (nbytes long)"""
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
        # b is a bytearray of this get's own (one copy out of the slot):
        # the tensor shares it, no second copy
        t = torch.frombuffer(b, dtype=torch.uint8) if len(b) else torch.empty(0, dtype=torch.uint8)
        tname = _TORCH.get(dt)
        if tname is None or not hasattr(torch, tname):
            return t
        return t.view(getattr(torch, tname)).reshape(shape)

    @staticmethod
    def _layer(layer):
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise Error(22, "layer=%r: expected a layer number" % (layer,))

    def get(self, layer, ids):
        """the experts ids of the model's layer `layer` -> [{projection: array}]"""
        self._layer(layer)
        ids = list(ids)
        for e in ids:
            if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < self.n_experts:
                raise Error(22, "expert %r: expected 0..%d" % (e, self.n_experts - 1))
        got = self._x.get(layer, ids)
        out = []
        for e, parts in zip(ids, got):
            pieces = self._x.pieces(layer, e)
            d = {}
            for name, b, (tensor, _off, nbytes) in zip(self.projections, parts, pieces):
                dt, shape = self._shape(tensor, nbytes)
                d[name] = self._array(b, dt, shape)
            out.append(d)
        return out

    # ---- the GPU cache (device="cuda") ----

    def fetch(self, layer, ids):
        """queue the reads of the experts `ids` (a CUDA int32 tensor, the
        router's choice) of the model's layer `layer` on the current CUDA
        stream -> their slots (a CUDA int32 tensor of the same length)"""
        self._layer(layer)
        if not self._gpu:
            raise Error(22, "fetch() is the GPU cache's (device=\"cuda\"); this one is on the CPU: get()")
        import torch
        if not isinstance(ids, torch.Tensor) or ids.device.type != "cuda" or ids.dim() != 1:
            raise Error(22, "ids: expected a 1-D CUDA tensor of expert numbers, the router's output")
        if ids.device.index != self._dev:
            raise Error(22, "ids are on %s, the cache on cuda:%d" % (ids.device, self._dev))
        ids = ids.to(torch.int32).contiguous()
        slots = torch.empty_like(ids)
        stream = torch.cuda.current_stream(self._dev)
        self._x.fetch(layer, ids.data_ptr(), ids.numel(), slots.data_ptr(), stream.cuda_stream)
        # ids and slots must live until the kernels have run: the caching
        # allocator reuses a freed block only in stream order (same stream)
        return slots

    def sync(self):
        """wait for the current stream; raise the first failed read since
        the last sync -> statistics"""
        if not self._gpu:
            raise Error(22, "sync() is the GPU cache's (device=\"cuda\"); the CPU cache's get() waits itself")
        import torch
        return self._x.sync(torch.cuda.current_stream(self._dev).cuda_stream)

    def weights(self, layer):
        """{projection: tensor [slots, ...]}: views of the slot memory for
        the model's layer `layer` (w[slots] picks the experts fetch() put
        there; their contents follow the fetches in stream order). Every
        expert of the layer must sit at the same place in a slot, which
        holds when the experts' sizes are multiples of 4 KiB, as in
        published checkpoints; otherwise gpunvme.Error"""
        self._layer(layer)
        if not self._gpu:
            raise Error(22, "weights() is the GPU cache's (device=\"cuda\"); this one is on the CPU: get()")
        import torch
        pos = self._x.place(layer, 0)
        for e in range(1, self.n_experts):
            if self._x.place(layer, e) != pos:
                raise Error(95, "layer %d: its experts sit at different places in a slot (sizes not multiples "
                                "of 4 KiB): weights() needs one layout" % layer)
        slot_bytes, nslots = self._x.layout()
        mem = torch.from_dlpack(self._x)
        out = {}
        for p, (tensor, _off, nbytes) in enumerate(self._x.pieces(layer, 0)):
            dt, shape = self._shape(tensor, nbytes)
            raw = mem.as_strided((nslots, nbytes), (slot_bytes, 1), pos[p])
            tname = _TORCH.get(dt)
            if tname is None or not hasattr(torch, tname):
                out[self.projections[p]] = raw
            else:
                out[self.projections[p]] = raw.view(getattr(torch, tname)).reshape((nslots,) + tuple(shape))
        return out

    def pieces(self, layer, expert):
        """[(tensor_name, offset, nbytes)] of one expert, in projection order"""
        return [(self._tensors[t][0], off, n) for t, off, n in self._x.pieces(layer, expert)]

    def stats(self):
        """the CPU cache's statistics (the GPU cache's come from sync())"""
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
