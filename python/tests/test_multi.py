# SPDX-License-Identifier: BSD-2-Clause
"""Several devices (device=[...]): the placement plans (layers, size, split)
as pure functions; the multi-device loading code run with CPU-tier loaders
standing in for GPUs (every tensor's bytes checked); the real two-GPU run
when two GPUs are there (skipped otherwise)."""
import numpy as np
import pytest

import gpunvme
from conftest import make_image, rand_bytes, st_bytes


class I:
    def __init__(self, index, name, nbytes):
        self.index, self.name, self.nbytes = index, name, nbytes


def infos(spec):
    return [I(k, n, b) for k, (n, b) in enumerate(spec)]


def test_place_layers_contiguous_and_balanced():
    spec = [("model.embed_tokens.weight", 1000)]
    for l in range(8):
        spec += [("model.layers.%d.attn.q.weight" % l, 100), ("model.layers.%d.mlp.weight" % l, 300)]
    spec += [("model.norm.weight", 4), ("lm_head.weight", 1000)]
    where = gpunvme._place(infos(spec), 2, "layers")
    assert where[0] == 0 and where[-1] == 1 and where[-2] == 1
    per_layer = {}
    for (n, _), w in zip(spec, where):
        l = gpunvme._layer_of(n)
        if l is not None:
            per_layer.setdefault(l, set()).add(w)
    assert all(len(v) == 1 for v in per_layer.values())  # a block is never cut
    devs = [per_layer[l].pop() for l in range(8)]
    assert devs == sorted(devs) and devs.count(0) == 4  # contiguous, balanced
    # GGUF names
    where = gpunvme._place(infos([("token_embd.weight", 5)] + [("blk.%d.ffn" % l, 10) for l in range(4)]), 4,
                           "layers")
    assert where == [0, 0, 1, 2, 3]


def test_place_size_greedy():
    where = gpunvme._place(infos([("a", 10), ("b", 70), ("c", 30), ("d", 40)]), 2, "size")
    load = [0, 0]
    for (_, b), w in zip([("a", 10), ("b", 70), ("c", 30), ("d", 40)], where):
        load[w] += b
    assert sorted(load) == [70, 80] and where[1] == 0


def test_place_errors():
    with pytest.raises(gpunvme.Error, match="placement="):
        gpunvme._place(infos([("a", 1)]), 2, "diagonal")
    with pytest.raises(gpunvme.Error, match="placement="):
        gpunvme.load_file("emu:/nonexistent", "/m", device=["cuda:0", "cuda:1"], placement="bad", framework="numpy")
    with pytest.raises(gpunvme.Error):
        gpunvme.load_file("emu:/nonexistent", "/m", device=[], framework="numpy")
    # load_pretrained takes the same several-GPU arguments
    with pytest.raises(gpunvme.Error, match="placement="):
        gpunvme.load_pretrained("emu:/nonexistent", "/m", device=["cuda:0", "cuda:1"], placement="bad",
                                framework="numpy")


def test_load_pretrained_several_devices(model, monkeypatch):
    """load_pretrained(device=[...], placement=, split_dim=) reaches the
    several-device loading with those arguments (CPU-tier stand-ins)"""
    uri, ts, data = model
    seen = []
    real = gpunvme._safetensors._load_multi

    def spy(model_, sel, devs, placement, split_dim, *rest):
        seen.append((placement, split_dim))
        return real(model_, sel, _cpu_devices(2), placement, split_dim, *rest)

    monkeypatch.setattr(gpunvme._safetensors, "_load_multi", spy)
    shards = gpunvme.load_pretrained(uri, "/m.safetensors", device=["cpu"], placement="split", framework="numpy")
    assert seen == [("split", 0)] and len(shards) == 2
    for name, _, shape, raw in ts:
        assert b"".join(np.ascontiguousarray(s[name]).view(np.uint8).tobytes() for s in shards) == \
            (raw + raw if not shape or shape[0] < 2 else raw), name
    with pytest.raises(gpunvme.Error, match="split_dim"):
        gpunvme.load_pretrained(uri, "/m.safetensors", device=["cpu"], placement="split", split_dim=1,
                                framework="numpy")


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(3)
    ts = [("model.embed_tokens.weight", "F32", [10, 16], rand_bytes(rng, 640))]
    for l in range(4):
        ts.append(("model.layers.%d.w" % l, "F16", [33, 8], rand_bytes(rng, 33 * 16)))
    ts += [("lm_head.weight", "F32", [1, 4], rand_bytes(rng, 16)), ("scalar", "F32", [], rand_bytes(rng, 4))]
    blob, data = st_bytes(ts)
    uri = make_image(tmp_path, {"/m.safetensors": blob})
    return uri, ts, data


def _cpu_devices(n):
    # CPU-tier loaders stand in for GPUs: same code path up to the copy
    return [(0, 0, "cpu%d" % k) for k in range(n)]


def test_multi_layers_and_size_bytes(model):
    uri, ts, data = model
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/m.safetensors")
        sel = list(gpunvme._index(m).values())
        for placement in ("layers", "size"):
            sd = gpunvme._load_multi(m, sel, _cpu_devices(3), placement, 0, "np", False, "m", None, None)
            assert list(sd) == [t[0] for t in ts]
            for name, _, shape, raw in ts:
                assert np.ascontiguousarray(sd[name]).view(np.uint8).tobytes() == raw
                assert list(sd[name].shape) == shape
            assert set(sd.placement.values()) <= {"cpu0", "cpu1", "cpu2"}


def test_multi_split_rows(model):
    uri, ts, data = model
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/m.safetensors")
        sel = list(gpunvme._index(m).values())
        shards = gpunvme._load_multi(m, sel, _cpu_devices(2), "split", 0, "np", False, "m", None, None)
        assert len(shards) == 2
        for name, _, shape, raw in ts:
            parts = [np.ascontiguousarray(s[name]).view(np.uint8).tobytes() for s in shards]
            if shape and shape[0] >= 2:
                n = shape[0]
                row = len(raw) // n
                assert parts[0] == raw[:(n // 2) * row] and parts[1] == raw[(n // 2) * row:], name
                assert shards[0][name].shape[0] + shards[1][name].shape[0] == n
            else:  # too few rows, or a scalar: whole on every device
                assert parts[0] == raw and parts[1] == raw, name
        with pytest.raises(gpunvme.Error, match="split_dim"):
            gpunvme._load_multi(m, sel, _cpu_devices(2), "split", 1, "np", False, "m", None, None)


def test_split_one_selection_per_device(model, monkeypatch):
    """split places and loads each device's parts in one selection (a
    selection per tensor cost each tensor its own placement and load)"""
    uri, ts, data = model
    calls = []
    real = gpunvme._gpunvme.Loader

    class Counting:
        def __init__(self, *a, **kw):
            self.ld = real(*a)

        def select_parts(self, parts, gap=None):
            calls.append(("parts", len(parts), gap))
            return self.ld.select_parts(parts, gap=gap)

        def select(self, idx):
            calls.append(("select", len(idx)))
            return self.ld.select(idx)

    monkeypatch.setattr(gpunvme._gpunvme, "Loader", Counting)
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/m.safetensors")
        sel = list(gpunvme._index(m).values())
        gpunvme._load_multi(m, sel, _cpu_devices(3), "split", 0, "np", False, "m", None, None)
    # gap=0: no device reads (or holds) the rows between its own
    assert calls == [("parts", len(ts), 0)] * 3


def test_split_zero_byte_tensors(tmp_path):
    """tensors of zero bytes among split ones: each device gets its slice of
    the empty whole, the others their rows, every byte checked"""
    rng = np.random.default_rng(4)
    ts = [("a", "F32", [6, 3], rand_bytes(rng, 72)), ("e", "BF16", [4, 0], b""), ("z", "F32", [0, 5], b""),
          ("b", "I8", [5], rand_bytes(rng, 5))]
    blob, _ = st_bytes(ts)
    uri = make_image(tmp_path, {"/z.safetensors": blob})
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/z.safetensors")
        sel = list(gpunvme._index(m).values())
        shards = gpunvme._load_multi(m, sel, _cpu_devices(2), "split", 0, "np", False, "z", None, None)
    assert [list(s) for s in shards] == [["a", "e", "z", "b"]] * 2
    assert [s["e"].shape for s in shards] == [(2, 0), (2, 0)]
    assert [s["z"].shape for s in shards] == [(0, 5), (0, 5)]
    assert shards[0]["a"].tobytes() + shards[1]["a"].tobytes() == ts[0][3]
    assert shards[0]["b"].tobytes() + shards[1]["b"].tobytes() == ts[3][3]


@pytest.mark.parametrize("edges", ["bounce", "direct"])
def test_split_edge_blocks(model, monkeypatch, edges):
    """placement split over 3 devices: every part starts and ends inside a
    file block. Its edge blocks go through the bounce buffer (the default)
    or land whole in the run's slack (GPUNVME_LOAD_EDGES=direct, read by the
    library at each load): every device's rows are the file's bytes either way"""
    uri, ts, data = model
    monkeypatch.setenv("GPUNVME_LOAD_EDGES", edges)
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/m.safetensors")
        sel = list(gpunvme._index(m).values())
        shards = gpunvme._load_multi(m, sel, _cpu_devices(3), "split", 0, "np", False, "m", None, None)
    for name, _, shape, raw in ts:
        parts = [s[name] for s in shards]
        if not shape or shape[0] < 3:  # whole on every device
            assert all(p.tobytes() == raw for p in parts), name
        else:
            assert b"".join(p.tobytes() for p in parts) == raw, name


def test_select_parts(model):
    """Loader.select_parts: several parts in one selection, each part's bytes
    as the file has them; every bad part a clear error"""
    uri, ts, data = model
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/m.safetensors")
        idx = {n: i.index for n, i in gpunvme._index(m).items()}
        ld = gpunvme._gpunvme.Loader(m, 0)
        raw = {t[0]: t[3] for t in ts}
        parts = [(idx["model.layers.2.w"], 16, 64), (idx["model.embed_tokens.weight"], 0, 640),
                 (idx["model.layers.2.w"], 0, 16), (idx["lm_head.weight"], 4, 12)]
        bufs = ld.select_parts(parts)
        bufs.load()
        names = ["model.layers.2.w", "model.embed_tokens.weight", "model.layers.2.w", "lm_head.weight"]
        for j, ((_, start, n), name) in enumerate(zip(parts, names)):
            got = np.from_dlpack(gpunvme._gpunvme.Tensor(bufs, j)).view(np.uint8).tobytes()
            assert got == raw[name][start:start + n], j
        w = idx["model.layers.0.w"]
        for bad, err in [([], "no parts"), ([(w, 0, 0)], "not inside"), ([(w, 500, 100)], "not inside"),
                         ([(999, 0, 4)], "out of range"), ([(w, 0, 4), (-1, 0, 4)], "out of range")]:
            with pytest.raises(gpunvme.Error, match=err):
                ld.select_parts(bad)
        for bad in [[(w, 0)], [[w, 0, 4]], [(w, "0", 4)], 5]:
            with pytest.raises(TypeError):
                ld.select_parts(bad)
        # the gap a run reads across: the default spans the 400 bytes
        # between two parts, gap=0 reads only the parts
        e = idx["model.embed_tokens.weight"]
        two = [(e, 0, 120), (e, 520, 120)]
        assert ld.select_parts(two).run_bytes == 640
        b0 = ld.select_parts(two, gap=0)
        assert b0.run_bytes == 240 and b0.n_runs == 2
        b0.load()
        assert [np.from_dlpack(gpunvme._gpunvme.Tensor(b0, j)).view(np.uint8).tobytes() for j in (0, 1)] == \
            [raw["model.embed_tokens.weight"][0:120], raw["model.embed_tokens.weight"][520:640]]
        with pytest.raises(gpunvme.Error, match="gap=-1"):
            ld.select_parts(two, gap=-1)
        with pytest.raises(TypeError, match="gap="):
            ld.select_parts(two, gap="4")


def test_load_many(model, tmp_path):
    """_gpunvme.load_many: several selections of one volume (CPU-tier loaders
    standing in for GPUs) loaded together, progress over all of them, every
    byte checked; a failure leaves none of them loaded; every bad input a
    clear error"""
    uri, ts, data = model
    raw = {t[0]: t[3] for t in ts}
    with gpunvme.Volume(uri) as v:
        m = v.open_model("/m.safetensors")
        idx = {n: i.index for n, i in gpunvme._index(m).items()}
        names = [["model.layers.0.w", "lm_head.weight"], ["model.embed_tokens.weight"], ["model.layers.3.w"]]
        lds = [gpunvme._gpunvme.Loader(m, 0) for _ in names]
        bufs = [ld.select([idx[n] for n in ns]) for ld, ns in zip(lds, names)]
        seen = []
        gpunvme._gpunvme.load_many(bufs, lambda done, total: seen.append((done, total)))
        total = sum(b.run_bytes for b in bufs)
        assert seen and seen[-1] == (total, total) and all(a <= b for a, b in zip(seen, seen[1:]))
        for b, ns in zip(bufs, names):
            for j, n in enumerate(ns):
                assert np.from_dlpack(gpunvme._gpunvme.Tensor(b, j)).view(np.uint8).tobytes() == raw[n], n
        # two selections of one loader, and a selection with nothing to read
        two = [lds[0].select([idx["model.layers.1.w"]]), lds[0].select([idx["model.layers.2.w"]]),
               lds[1].select([])]
        gpunvme._gpunvme.load_many(two, progress=None)
        assert np.from_dlpack(gpunvme._gpunvme.Tensor(two[1], 0)).view(np.uint8).tobytes() == raw["model.layers.2.w"]
        # a failure (here the progress callback's) leaves none loaded: no
        # tensor can be made of them
        fresh = [ld.select([idx["model.layers.0.w"]]) for ld in lds[:2]]

        def boom(done, total):
            raise RuntimeError("stop")

        with pytest.raises(RuntimeError, match="stop"):
            gpunvme._gpunvme.load_many(fresh, boom)
        for b in fresh:
            with pytest.raises(gpunvme.Error):
                gpunvme._gpunvme.Tensor(b, 0)
        with pytest.raises(gpunvme.Error, match="no Buffers"):
            gpunvme._gpunvme.load_many([])
        with pytest.raises(TypeError, match="not Buffers"):
            gpunvme._gpunvme.load_many([bufs[0], lds[0]])
        with pytest.raises(TypeError):
            gpunvme._gpunvme.load_many(5)
        with pytest.raises(gpunvme.Error, match="also item 0"):
            gpunvme._gpunvme.load_many([bufs[0], bufs[0]])
        with gpunvme.Volume(uri) as v2:
            m2 = v2.open_model("/m.safetensors")
            other = gpunvme._gpunvme.Loader(m2, 0).select([0])
            with pytest.raises(gpunvme.Error, match="another volume"):
                gpunvme._gpunvme.load_many([bufs[0], other])


def test_replicas_one_volume_per_device(model, tmp_path):
    """replicas: device k reads through volume k (here two emulated
    controllers over the same image, CPU-tier loaders standing in for GPUs),
    the volumes' loads in threads of their own, every byte checked, with a
    progress bar over all of them"""
    uri, ts, data = model
    raw = {t[0]: t[3] for t in ts}
    with gpunvme.Volume(uri) as v0, gpunvme.Volume(uri) as v1:
        models = [v0.open_model("/m.safetensors"), v1.open_model("/m.safetensors")]
        assert models[0].volume is v0 and models[1].volume is v1
        sel = list(gpunvme._index(models[0]).values())
        for placement in ("layers", "size"):
            sd = gpunvme._load_multi(models, sel, _cpu_devices(2), placement, 0, "np", True, "m", None, None)
            for name in raw:
                assert np.ascontiguousarray(sd[name]).view(np.uint8).tobytes() == raw[name], (placement, name)
        shards = gpunvme._load_multi(models, sel, _cpu_devices(2), "split", 0, "np", False, "m", None, None)
        w = "model.layers.1.w"
        assert b"".join(np.ascontiguousarray(s[w]).view(np.uint8).tobytes() for s in shards) == raw[w]
        with pytest.raises(gpunvme.Error, match="one per device"):
            gpunvme._load_multi(models, sel, _cpu_devices(3), "layers", 0, "np", False, "m", None, None)


def test_replicas_refusals(model, tmp_path):
    """replicas that differ, too few or too many volumes, a list of volumes
    for one device: each a clear error"""
    uri, ts, data = model
    rng = np.random.default_rng(8)
    other_blob, _ = st_bytes([("model.embed_tokens.weight", "F32", [10, 16], rand_bytes(rng, 640))])
    other = make_image(tmp_path / "other", {"/m.safetensors": other_blob})
    with pytest.raises(gpunvme.Error, match="needs device="):
        gpunvme.load_file([uri, uri], "/m.safetensors", device="cpu", framework="numpy")
    with pytest.raises(gpunvme.Error, match="2 volumes for 3 devices"):
        gpunvme.load_file([uri, uri], "/m.safetensors", device=["cuda:0", "cuda:1", "cuda:2"], framework="numpy")
    with gpunvme.Volume(uri) as v0, gpunvme.Volume(other) as v1:
        ms = [v0.open_model("/m.safetensors"), v1.open_model("/m.safetensors")]
        # the first entry that differs, named (here its offset: the
        # other file's header is shorter)
        with pytest.raises(gpunvme.Error, match=r"replica on volume 1 .* differs from volume 0's .*: tensor 0: "
                                                r"\('model.embed_tokens.weight'.* against .*; replicas must hold"):
            gpunvme._safetensors._same_model(ms, [uri, other], "/m.safetensors")
        gpunvme._safetensors._same_model([ms[0], v0.open_model("/m.safetensors")], [uri, uri], "/m.safetensors")


@pytest.mark.skipif(not gpunvme.cuda_available() or gpunvme._gpunvme.cuda_device_count() < 2,
                    reason="needs two CUDA GPUs")
def test_two_gpus(model):
    torch = pytest.importorskip("torch")
    uri, ts, data = model
    sd = gpunvme.load_file(uri, "/m.safetensors", device=["cuda:0", "cuda:1"], placement="layers")
    def tbytes(t):
        # reshape(-1) first: a 0-dim tensor cannot change its element size
        # in place (torch raises for .view(torch.uint8) of a scalar)
        return t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()

    for name, _, _, raw in ts:
        assert sd[name].device.type == "cuda"
        assert tbytes(sd[name]) == raw, name
    assert {str(sd[n].device) for n in sd} == {"cuda:0", "cuda:1"}
    shards = gpunvme.load_file(uri, "/m.safetensors", device=["cuda:0", "cuda:1"], placement="split")
    assert [str(s["model.layers.0.w"].device) for s in shards] == ["cuda:0", "cuda:1"]
    for name, _, shape, raw in ts:
        parts = [tbytes(s[name]) for s in shards]
        assert [str(s[name].device) for s in shards] == ["cuda:0", "cuda:1"], name
        if shape and shape[0] >= 2:  # rows split between the GPUs
            row = len(raw) // shape[0]
            assert parts[0] == raw[:(shape[0] // 2) * row] and parts[1] == raw[(shape[0] // 2) * row:], name
        else:  # too small to split: whole on both
            assert parts[0] == raw and parts[1] == raw, name
    # replicas: GPU k through volume k (two emulated controllers over the
    # image), each placement, the volumes' loads in threads of their own
    for placement in ("layers", "size"):
        sd = gpunvme.load_file([uri, uri], "/m.safetensors", device=["cuda:0", "cuda:1"], placement=placement)
        for name, _, _, raw in ts:
            assert tbytes(sd[name]) == raw, (placement, name)
        assert {str(sd[n].device) for n in sd} == {"cuda:0", "cuda:1"}, placement
    shards = gpunvme.load_file([uri, uri], "/m.safetensors", device=["cuda:0", "cuda:1"], placement="split")
    for name, _, shape, raw in ts:
        parts = [tbytes(s[name]) for s in shards]
        if shape and shape[0] >= 2:
            assert parts[0] + parts[1] == raw, name
        else:
            assert parts == [raw, raw], name
