# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: the layer stream: models bigger than GPU memory, a window of layers at a time."""
from . import _gpunvme
from ._gpunvme import Error
from ._parse import _Info, _device, _framework, _tier, _wrap
from ._volumes import _path, _volume
from ._loading import StateDict, _queue_opts


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
