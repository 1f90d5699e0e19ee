# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: loading tensors through a loader: progress, StateDict, tensor selection."""
import sys
import weakref

from . import _gpunvme
from ._gpunvme import Error
from ._parse import _Info, _wrap


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


def _loader(model, tier, devidx, q, d):
    """A Loader for model that shares the loader (queues, bounce buffer) of
    the volume's last Loader for this tier, device and queue request while
    that one lives (the tensors of an earlier load hold it): load_file of a
    checkpoint's shards one by one then sets up its queues once, not once a
    shard. The volume only remembers it (a weak reference): no tensor memory
    is kept alive for it. Once it is gone, its loader waits parked on the
    volume for the next Loader of the same kind (_gpunvme_loader.c)."""
    cache = getattr(model.volume, "__dict__", None)
    if cache is None:  # a bare _gpunvme.Volume: no place to remember it
        return _gpunvme.Loader(model, tier, devidx, q, d)
    cache = cache.setdefault("_loaders", {})
    key = (tier, devidx, q, d)
    prev = cache.get(key)
    ld = _gpunvme.Loader(model, tier, devidx, q, d, share=prev() if prev is not None else None)
    cache[key] = weakref.ref(ld)
    return ld


def _load(model, infos, tier, devidx, fw, progress, desc, queues=None, depth=None):
    q, d = _queue_opts(queues, depth)
    loader = _loader(model, tier, devidx, q, d)
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
