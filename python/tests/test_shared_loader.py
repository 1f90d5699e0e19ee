# SPDX-License-Identifier: BSD-2-Clause
"""Loaders of one volume's files sharing one loader (its queues and bounce
buffer): load_file of a checkpoint's shards one by one sets the loader up
once. Each load reads its own file wherever the shared loader last pointed;
the volume remembers the last Loader only weakly, and parks its loader when
the last Loader goes, for the next Loader of the same kind; loaders that
asked for other queues, another tier or device are not shared. Every byte
compared, on an image and on an md array."""
import gc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpunvme
from gpunvme import _gpunvme
from conftest import make_image, rand_bytes, st_bytes

MKRAID0 = Path(__file__).resolve().parents[2] / "bench" / "md_mkraid0.py"


def raw(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def shards(n=4, seed=5):
    """n safetensors files of different sizes and layouts"""
    rng = np.random.default_rng(seed)
    files, want = {}, {}
    for k in range(n):
        rows = 96 + 37 * k
        blob, data = st_bytes([("s%d.w" % k, "F32", [rows, 1024], rand_bytes(rng, rows * 1024 * 4)),
                               ("s%d.b" % k, "U8", [4099 + k], rand_bytes(rng, 4099 + k))])
        files["/ck/model-%05d.safetensors" % k] = blob
        want.update(data)
    return files, want


def load_shards(v, paths):
    out = {}
    for p in paths:
        out.update(gpunvme.load_file(v, p, framework="numpy"))
    return out


def check(sd, want):
    assert sorted(sd) == sorted(want)
    for name, data in want.items():
        assert raw(sd[name]) == data, name


def shared_count(v):
    """how many Loaders share the volume's last CPU-tier loader"""
    ref = v.__dict__.get("_loaders", {}).get((0, 0, 0, 0))
    ld = ref() if ref is not None else None
    return ld.sharing if ld is not None else 0


def test_shards_share_one_loader(tmp_path):
    files, want = shards()
    uri = make_image(tmp_path, files)
    with gpunvme.Volume(uri) as v:
        sd = load_shards(v, sorted(files))
        check(sd, want)
        # every shard's Loader lives (its tensors hold it): one loader for all
        assert shared_count(v) == len(files)
        # loaded again while the first results live: still one, and right
        sd2 = load_shards(v, sorted(files, reverse=True))
        check(sd2, want)
        assert shared_count(v) == 2 * len(files)
        del sd, sd2
        gc.collect()
        # no Loader held any more: the volume kept none alive, only their
        # loader, parked for the next
        assert shared_count(v) == 0
        assert v._parked[:4] == (0, 0, 0, 0)
        check(load_shards(v, sorted(files)), want)


def test_parked_loader_taken_over(tmp_path):
    """the last Loader gone, its loader waits on the volume: the next
    Loader of the same tier, device and queues takes it over (and reads its
    own file with it); one of another kind makes it go first (its queue
    pairs back); close() makes it go; the controller goes after it"""
    files, want = shards(3, seed=33)
    uri = make_image(tmp_path, files)
    paths = sorted(files)
    v = gpunvme.Volume(uri)
    assert v._parked is None
    sd = gpunvme.load_file(v, paths[0], framework="numpy")
    assert v._parked is None  # its Loader lives (the tensors hold it)
    del sd
    gc.collect()
    first = v._parked
    assert first[:4] == (0, 0, 0, 0)
    # taken over by the next file's Loader: no longer parked while it lives
    sd = gpunvme.load_file(v, paths[1], framework="numpy")
    assert v._parked is None
    check(sd, {k: w for k, w in want.items() if k.startswith("s1.")})
    del sd
    gc.collect()
    assert v._parked == first  # the same loader, parked again
    # another queue request: the parked loader goes before the new one is made
    m = v.open_model(paths[2])
    ld = _gpunvme.Loader(m, 0, 0, 2, 8)
    assert v._parked is None
    b = ld.select(list(range(len(m.tensors()))))
    b.load()
    for j, t in enumerate(m.tensors()):
        assert bytes(memoryview(np.from_dlpack(_gpunvme.Tensor(b, j)))) == want[t[0]], t[0]
    del b, ld
    gc.collect()
    second = v._parked
    assert second[:4] == (0, 0, 2, 8) and second[4] != first[4]
    # an explicit tier other than the parked one's: not taken, and the
    # parked one goes (Tier 1 needs CUDA: without it the Loader is refused)
    try:
        ld = _gpunvme.Loader(m, 1)
    except gpunvme.Error:
        ld = None
    assert v._parked is None
    del ld
    gc.collect()
    # the CPU tier again: a new loader, parked at the end, then close()
    # lets it go with the controller
    check(load_shards(v, paths), want)
    gc.collect()
    third = v._parked
    assert third[:4] == (0, 0, 0, 0) and third[4] not in (first[4], second[4])
    v.close()
    assert v._parked is None
    with pytest.raises(gpunvme.Error, match="closed"):
        gpunvme.load_file(v, paths[0], framework="numpy")
    del m
    gc.collect()


def test_parked_loader_closed_with_tensors_alive(tmp_path):
    """close() while tensors live: the parked loader goes at once, the
    tensors stay readable, no Loader parks on a closed volume"""
    files, want = shards(2, seed=34)
    uri = make_image(tmp_path, files)
    paths = sorted(files)
    v = gpunvme.Volume(uri)
    keep = gpunvme.load_file(v, paths[0], framework="numpy")
    sd = gpunvme.load_file(v, paths[1], framework="numpy")
    m = v.open_model(paths[1])
    ld = _gpunvme.Loader(m, 0, 0, 1, 4)  # another kind: the next to park
    del ld
    gc.collect()
    assert v._parked[:4] == (0, 0, 1, 4)
    v.close()
    assert v._parked is None
    del sd
    gc.collect()
    assert v._parked is None  # the last Loader of a closed volume is destroyed
    check(keep, {k: w for k, w in want.items() if k.startswith("s0.")})
    del keep, m
    gc.collect()


def test_parked_loader_given_back_to_streams_and_expert_caches(tmp_path):
    """a layer stream and an expert cache take queue pairs of their own:
    opening either on the volume gives the parked loader back first (on the
    GPU tiers it holds queue pairs), and each still reads every byte"""
    from test_moe import mixtral
    from test_stream import decoder_files
    rng = np.random.default_rng(35)
    files, data = decoder_files(rng)
    mx, mx_data = mixtral(rng, layers=1, experts=2)
    files["/m/model.safetensors"] = mx
    uri = make_image(tmp_path, files)
    with gpunvme.Volume(uri) as v:
        shard = sorted(p for p in files if p.endswith(".safetensors") and p.startswith("/llm/"))[0]
        sd = gpunvme.load_file(v, shard, framework="numpy")
        del sd
        gc.collect()
        assert v._parked is not None
        s = gpunvme.stream(v, "/llm", window=2, device="cpu", framework="numpy")
        assert v._parked is None
        for i, layer in s:
            for n, t in layer.items():
                assert raw(t) == data[n], n
        s.close()
        sd = gpunvme.load_file(v, "/m/model.safetensors", framework="numpy")
        del sd
        gc.collect()
        assert v._parked is not None
        ex = _gpunvme.Experts(v.open_model("/m/model.safetensors"), 2)
        assert v._parked is None
        del ex
        gc.collect()


def test_shared_loads_in_any_order(tmp_path):
    """Buffers of two files of one shared loader loaded in turns: each load
    reads its own file, whichever file the loader read last"""
    files, want = shards(3, seed=9)
    uri = make_image(tmp_path, files)
    with gpunvme.Volume(uri) as v:
        paths = sorted(files)
        models = [v.open_model(p) for p in paths]
        first = _gpunvme.Loader(models[0], 0)
        lds = [first] + [_gpunvme.Loader(m, 0, share=first) for m in models[1:]]
        assert first.sharing == 3
        bufs = [ld.select(list(range(len(m.tensors())))) for ld, m in zip(lds, models)]
        for k in (2, 0, 1, 0, 2):
            bufs[k].load()
            m = models[k]
            for j, t in enumerate(m.tensors()):
                got = bytes(memoryview(np.from_dlpack(_gpunvme.Tensor(bufs[k], j))))
                assert got == want[t[0]], (k, t[0])


def test_not_shared_across_requests(tmp_path):
    files, _ = shards(2)
    uri = make_image(tmp_path, files)
    with gpunvme.Volume(uri) as v:
        a, b = (v.open_model(p) for p in sorted(files))
        first = _gpunvme.Loader(a, 0, 0, 2, 8)
        # other queues or depth: a loader of its own
        for q, d in ((1, 8), (2, 16), (0, 0)):
            other = _gpunvme.Loader(b, 0, 0, q, d, share=first)
            assert other.sharing == 1 and first.sharing == 1
        same = _gpunvme.Loader(b, 0, 0, 2, 8, share=first)
        assert same.sharing == 2
        # another volume's Loader is never shared
        with gpunvme.Volume(uri) as w:
            c = w.open_model(sorted(files)[0])
            assert _gpunvme.Loader(c, 0, 0, 2, 8, share=first).sharing == 1
        with pytest.raises(TypeError, match="share= takes a Loader"):
            _gpunvme.Loader(b, 0, share="loader")


def test_md_shards_share_one_loader(tmp_path):
    files, want = shards(3, seed=21)
    uri = make_image(tmp_path, files)
    img = uri[len("emu:"):]
    subprocess.run([sys.executable, str(MKRAID0), img, "4", "64", str(tmp_path / "m")], check=True,
                   stdout=subprocess.DEVNULL)
    md = "md:" + ";".join("emu:%s" % (tmp_path / ("m%d.img" % k)) for k in range(4))
    with gpunvme.Volume(md) as v:
        sd = load_shards(v, sorted(files))
        check(sd, want)
        assert shared_count(v) == len(files)
        check(load_shards(v, sorted(files, reverse=True)), want)


@pytest.mark.skipif(not (gpunvme.HAVE_CUDA and gpunvme.cuda_available()), reason="needs a CUDA GPU and the CUDA build")
@pytest.mark.parametrize("tier", [2, 1])
def test_gpu_shared_loads_together(tmp_path, tier):
    """the GPU tiers: three files' Buffers on one shared loader loaded by one
    load_many (their reads queued on one stream, one wait), then each again
    alone in another order, and load_file of the shards: every byte"""
    torch = pytest.importorskip("torch")
    files, want = shards(3, seed=31)
    uri = make_image(tmp_path, files)
    with gpunvme.Volume(uri) as v:
        models = [v.open_model(p) for p in sorted(files)]
        first = _gpunvme.Loader(models[0], tier, 0)
        lds = [first] + [_gpunvme.Loader(m, tier, 0, share=first) for m in models[1:]]
        assert first.sharing == 3
        bufs = [ld.select(list(range(len(m.tensors())))) for ld, m in zip(lds, models)]

        def check_bufs(k):
            for j, t in enumerate(models[k].tensors()):
                got = torch.from_dlpack(_gpunvme.Tensor(bufs[k], j)).cpu().numpy().tobytes()
                assert got == want[t[0]], (k, t[0])

        _gpunvme.load_many(bufs)
        for k in range(3):
            check_bufs(k)
        for k in (2, 0, 1):
            bufs[k].load()
            check_bufs(k)
        dev = "cuda:0"
        sd = {}
        for p in sorted(files):
            sd.update(gpunvme.load_file(v, p, device=dev, tier=tier))
        for name, data in want.items():
            assert sd[name].cpu().contiguous().view(torch.uint8).numpy().tobytes() == data, name
        assert shared_count_gpu(v, tier) == len(files)


def shared_count_gpu(v, tier):
    for key, ref in v.__dict__.get("_loaders", {}).items():
        ld = ref()
        if ld is not None and key[:2] == (tier, 0):
            return ld.sharing
    return 0
