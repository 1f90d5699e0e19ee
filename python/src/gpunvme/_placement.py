# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: several GPUs: placing tensors (layers, size, split) and loading each device's share."""
import copy
import re
import threading

from . import _gpunvme
from ._gpunvme import Error
from ._parse import _NP, _NP_RAW, _device, _wrap
from ._loading import StateDict, _Progress, _fill, _loader, _queue_opts


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


def _split_parts(full, k):
    """split: device k's parts of [(info, _split_rows(info, ndev))] as
    (index, start, length) in the file's bytes of each tensor (its rows,
    or the whole of a tensor too small to split), and each part's shape
    (None: the tensor's own)"""
    parts, shapes = [], []
    for info, r in full:
        if r is None:
            parts.append((info.index, 0, info.nbytes))
            shapes.append(None)
        else:
            first, count = r[k]
            row = info.nbytes // info.shape[0]
            parts.append((info.index, first * row, count * row))
            shapes.append((count,) + tuple(info.shape[1:]))
    return parts, shapes


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


class _Stopped(Exception):
    """a volume's load ended early because another one failed, or the caller
    pressed Ctrl-C (never the error reported)"""


def _load_together(groups, progress, desc):
    """every device's selections loaded at the same time. groups: lists of
    Buffers, one list per volume. A volume's are loaded by one load_many
    (each step queued on every GPU's loader before any is waited for: one
    after the other, each GPU idled while the others loaded); several
    volumes (replicas) each in a thread of its own, since each has its own
    lock (load_many releases the GIL while it reads). A failure stops the
    other volumes' loads at the end of their step (no result will be
    returned), and is raised once every load has ended."""
    groups = [[b for b in g if b is not None] for g in groups]
    groups = [g for g in groups if g]
    if not groups:
        return
    bar = _Progress(sum(b.run_bytes for g in groups for b in g), desc) if progress else None
    done = [0] * len(groups)
    lock = threading.Lock()
    stop = threading.Event()

    def one(k):
        def tick(d, total):
            # after every step: another volume's failure, or the caller's
            # Ctrl-C (seen by the main thread alone), ends this load here
            if stop.is_set():
                raise _Stopped()
            if bar:
                # callbacks run with the GIL: the lock only keeps the sum
                # and the bar in step when several volumes report
                with lock:
                    done[k] = d
                    bar(sum(done), bar.total)
        _gpunvme.load_many(groups[k], tick if bar or len(groups) > 1 else None)

    try:
        if len(groups) == 1:
            one(0)
            return
        errors = [None] * len(groups)

        # each thread's end, as an Event: a Thread.join() that Ctrl-C
        # interrupted marks the thread stopped while it still runs (CPython
        # 3.11's bpo-45274 handling), so a second join would not wait
        ended = [threading.Event() for _ in groups]

        def run(k):
            try:
                one(k)
            except BaseException as e:  # raised below, in the caller's thread
                errors[k] = e
                stop.set()
            finally:
                ended[k].set()

        threads = [threading.Thread(target=run, args=(k,), name="gpunvme-load-%d" % k) for k in range(len(groups))]
        for t in threads:
            t.start()
        try:
            for e in ended:
                e.wait()
        except BaseException:
            # Ctrl-C in the caller: every volume's load stops at the end of
            # its step, and nothing is returned before they have
            stop.set()
            for e in ended:
                e.wait()
            raise
        finally:
            for t in threads:
                t.join()
        first = next((e for e in errors if e is not None and not isinstance(e, _Stopped)), None)
        if first is not None:
            raise first
    finally:
        if bar:
            bar.close()


def _load_multi(model, sel, devs, placement, split_dim, fw, progress, desc, queues, depth):
    """sel loaded onto several devices, each device its own Loader (its own
    queues on every controller of the volume), no tensor staged on another
    GPU first, the devices' loads together (_load_together). model: one
    Model, or one per device (replicas on their own volumes, the same
    tensors: device k reads model[k]).
    -> StateDict (layers, size) or [StateDict per device] (split)."""
    q, d = _queue_opts(queues, depth)
    models = list(model) if isinstance(model, (list, tuple)) else [model] * len(devs)
    if len(models) != len(devs):
        raise Error(22, "%d models for %d devices: one per device" % (len(models), len(devs)))

    def groups(per_dev):
        """the devices' Buffers grouped by volume (replicas: one each)"""
        out = {}
        for k, bufs in enumerate(per_dev):
            out.setdefault(id(models[k].volume), []).extend(bufs)
        return list(out.values())

    shown = "%s -> %d devices" % (desc, len(devs))
    if placement == "split":
        if split_dim != 0:
            raise Error(95, "split_dim=%r: only dimension 0 (rows, contiguous in the file) is split so far"
                        % (split_dim,))
        rows = [_split_rows(info, len(devs)) for info in sel]
        full = [(info, r) for info, r in zip(sel, rows) if info.nbytes]
        # a tensor of zero bytes has nothing to read (and a part of zero
        # bytes is refused): each device gets a slice of the empty whole
        empty = [(info, r) for info, r in zip(sel, rows) if not info.nbytes]
        plans = []
        for k, (t, idx, _) in enumerate(devs):
            ld = _loader(models[k], t, idx, q, d)
            # one selection per device for every part it holds: a
            # selection per tensor cost each its own placement and load
            parts, shapes = _split_parts(full, k)
            # gap=0: the gaps between a device's rows are the other
            # devices' rows, which it must neither read nor hold
            bufs = ld.select_parts(parts, gap=0) if parts else None
            ebufs = ld.select([info.index for info, _ in empty]) if empty else None
            plans.append((parts, shapes, bufs, ebufs))
        _load_together(groups([p[2:] for p in plans]), progress, shown)
        out = []
        for k, (parts, shapes, bufs, ebufs) in enumerate(plans):
            got = {}
            for j, ((info, _), shape) in enumerate(zip(full, shapes)):
                if shape is None:
                    got[info.name] = _wrap(_gpunvme.Tensor(bufs, j), info, fw)
                else:
                    part = copy.copy(info)
                    part.shape = shape
                    part.nbytes = parts[j][2]
                    got[info.name] = _wrap(_gpunvme.Tensor(bufs, j), part, fw)
            for j, (info, r) in enumerate(empty):
                whole = _wrap(_gpunvme.Tensor(ebufs, j), info, fw)
                got[info.name] = whole if r is None else whole[r[k][0]:r[k][0] + r[k][1]]
            sd = StateDict()
            sd.metadata = models[0].metadata()
            _fill(sd, sel, [got[info.name] for info in sel])
            out.append(sd)
        return out
    where = _place(sel, len(devs), placement)
    plans = []
    for k, (t, idx, _) in enumerate(devs):
        mine = [info for info, w in zip(sel, where) if w == k]
        bufs = _loader(models[k], t, idx, q, d).select([info.index for info in mine]) if mine else None
        plans.append((mine, bufs))
    _load_together(groups([[bufs] for _, bufs in plans]), progress, shown)
    got = {}
    for mine, bufs in plans:
        for j, info in enumerate(mine):
            got[info.name] = _wrap(_gpunvme.Tensor(bufs, j), info, fw)
    sd = StateDict()
    sd.metadata = models[0].metadata()
    # the file's order, as load_file with one device
    _fill(sd, sel, [got[i.name] for i in sel])
    sd.placement = {i.name: devs[w][2] for i, w in zip(sel, where)}
    return sd
