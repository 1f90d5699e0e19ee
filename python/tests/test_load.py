# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme on the CPU tier with numpy: every byte loaded compared with the
bytes the test wrote; ownership; errors."""
import errno
import gc
import os

import numpy as np
import pytest

import gpunvme
from conftest import gpt_disk as _gpt_disk, NP_OF, ST_BITS, make_image, rand_bytes, st_bytes


def raw(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


# ---- safetensors --------------------------------------------------------------


def test_load_file_every_dtype(models):
    sd = gpunvme.load_file(models.uri, "/m/every.safetensors", framework="numpy")
    assert isinstance(sd, gpunvme.StateDict) and isinstance(sd, dict)
    assert list(sd) == [t[0] for t in models.st_tensors]
    assert sd.metadata == {"format": "pt", "who": "test"}
    assert sd.ggml_types == {}
    for name, dt, shape, data in models.st_tensors:
        a = sd[name]
        assert sd.dtypes[name] == dt
        assert raw(a) == data, name
        if ST_BITS[dt] < 8:  # sub-byte types: the bytes as stored
            assert a.dtype == np.uint8 and a.shape == (len(data),)
            continue
        assert a.dtype == np.dtype(NP_OF[dt]), name
        assert a.shape == tuple(shape), name
        assert a.flags.c_contiguous
    assert sd["scalar"].shape == () and sd["scalar"][()] == np.float32(1.5)
    assert sd["empty"].shape == (0, 3)
    assert list(sd["weird*,[name]"]) == [7, -7]


def test_tensors_subset_exact_names(models):
    sd = gpunvme.load_file(models.uri, "/m/every.safetensors", framework="np",
                           tensors=["weird*,[name]", "dtype.F32"])
    assert list(sd) == ["weird*,[name]", "dtype.F32"]
    assert raw(sd["dtype.F32"]) == models.st_data["dtype.F32"]
    sd = gpunvme.load_file(models.uri, "/m/every.safetensors", framework="np", tensors="empty")
    assert list(sd) == ["empty"]


def test_big_runs_and_progress(models, capsys):
    sd = gpunvme.load_file(models.uri, "/m/big.safetensors", framework="numpy", progress=True)
    for name, data in models.big_data.items():
        assert sd[name].shape == (64, 1024) and raw(sd[name]) == data
    err = capsys.readouterr().err
    assert "big.safetensors" in err or err == ""  # tqdm or the plain line


def test_safe_open(models):
    with gpunvme.safe_open(models.uri, "/m/every.safetensors", framework="np") as f:
        assert f.keys() == [t[0] for t in models.st_tensors]
        assert f.metadata() == {"format": "pt", "who": "test"}
        assert f.dtypes()["dtype.BF16"] == "BF16"
        assert f.ggml_types() == {}
        t = f.get_tensor("dtype.I16")
        assert t.dtype == np.int16 and raw(t) == models.st_data["dtype.I16"]
        sl = f.get_slice("dtype.F64")
        assert sl.get_shape() == [4, 6] and sl.get_dtype() == "F64"
        full = np.frombuffer(models.st_data["dtype.F64"], np.float64).reshape(4, 6)
        assert np.array_equal(sl[1:3], full[1:3], equal_nan=True)
        assert np.array_equal(sl[:, 2], full[:, 2], equal_nan=True)
        assert np.array_equal(sl[3], full[3], equal_nan=True)
        assert np.array_equal(sl[::2, 1:5], full[::2, 1:5], equal_nan=True)
        with pytest.raises(gpunvme.Error) as e:
            f.get_tensor("nope")
        assert e.value.errno == errno.ENOENT
    with pytest.raises(gpunvme.Error):
        f.keys()  # closed


def test_load_pretrained_index(models):
    sd = gpunvme.load_pretrained(models.uri, "/hf", framework="numpy")
    assert set(sd) == set(models.hf_data)
    for n, data in models.hf_data.items():
        assert raw(sd[n]) == data
    assert sd["a.w"].shape == (3, 5) and sd["b.w"].dtype == np.uint16 and sd.dtypes["b.w"] == "BF16"
    sd2 = gpunvme.load_pretrained(models.uri, "/hf/model.safetensors.index.json", framework="numpy")
    assert set(sd2) == set(sd)


def test_symlinks_hub_cache(models):
    """relative links into blobs/, an absolute link to a snapshot, followed
    inside the file system; loops and dangling links are errors"""
    for d in ["/hub/models--o--m/snapshots/rev", "/latest", "/latest/model.safetensors.index.json"]:
        sd = gpunvme.load_pretrained(models.uri, d, framework="numpy")
        assert sorted(sd) == sorted(models.hf_data), d
        for k, v in models.hf_data.items():
            assert raw(sd[k]) == v, (d, k)
    sd = gpunvme.load_file(models.uri, "/latest/model-00002-of-00002.safetensors", framework="numpy")
    assert list(sd) == ["b.w"]
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(models.uri, "/loop/a", framework="numpy")
    assert e.value.errno == errno.ELOOP and "loop" in e.value.strerror
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(models.uri, "/loop/dangling", framework="numpy")
    assert e.value.errno == errno.ENOENT and "dangling" in e.value.strerror


def test_load_pretrained_single(models):
    sd = gpunvme.load_pretrained(models.uri, "/hf1", framework="numpy")
    assert list(sd) == ["x"] and raw(sd["x"]) == models.single_data["x"] and sd["x"].dtype == np.int64


# ---- GGUF ------------------------------------------------------------------------------


def test_gguf(models):
    sd = gpunvme.load_file(models.uri, "/m/q.gguf", framework="numpy")
    assert list(sd) == [t[0] for t in models.gg_t]
    want = {  # row-major shapes (ne reversed); quantized: rows of raw blocks
        "tok.weight": ((3, 8), np.float32), "half": ((2, 2, 16), np.float16), "bf": ((4,), np.uint16),
        "q4": ((3, 36), np.uint8), "q8": ((2, 2, 34), np.uint8), "qk": ((2, 288), np.uint8),
        "q6": ((210,), np.uint8), "i8": ((5,), np.int8),
    }
    for name, ty, ne, data in models.gg_t:
        shape, dt = want[name]
        assert sd[name].shape == shape and sd[name].dtype == dt, name
        assert raw(sd[name]) == data, name
        assert sd.ggml_types[name] == ty
    with gpunvme.safe_open(models.uri, "/m/q.gguf", framework="numpy") as f:
        assert f.ggml_types()["qk"] == "Q4_K"
        assert f.metadata() is None
        assert f.get_slice("q4").get_shape() == [3, 36]
        full = np.frombuffer(models.gg_t[3][3], np.uint8).reshape(3, 36)
        assert np.array_equal(f.get_slice("q4")[1:3], full[1:3])  # rows of raw blocks, read alone
        assert np.array_equal(f.get_slice("q4")[-1, 18:], full[-1, 18:])


def test_get_slice_reads_only_the_rows(models):
    """rows of the outermost dimension are read alone (select_bytes), every
    other index through the whole tensor: both equal numpy's slicing"""
    name = "layer.3.w"
    full = np.frombuffer(models.big_data[name], np.float32).reshape(64, 1024)
    with gpunvme.safe_open(models.uri, "/m/big.safetensors", framework="numpy") as f:
        sl = f.get_slice(name)
        for idx in [np.s_[5:9], np.s_[63], np.s_[-2], np.s_[0:64], np.s_[10:12, 3:700], np.s_[7, 100:200],
                    np.s_[-3:], np.s_[:1], np.s_[::3], np.s_[..., 5], np.s_[60:200], np.s_[9:3],
                    np.s_[:, 1000], np.s_[2:4, ...]]:
            got, want = sl[idx], full[idx]  # random bits: NaNs compare by bytes
            assert got.dtype == np.float32 and got.shape == want.shape, idx
            assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), idx
        for bad in [64, -65]:
            with pytest.raises(IndexError):
                sl[bad]
        # a part of a tensor is not the whole: the loader read count*row bytes
        part = f._get_rows(f._info(name), 5, 4)
        assert part.shape == (4, 1024) and part.nbytes == 4 * 4096
        for bad in [(0, 0), (60, 5)]:
            with pytest.raises(gpunvme.Error):
                f._loader.select_bytes(f._info(name).index, bad[0] * 4096, bad[1] * 4096)


def test_split_gguf(models):
    for shard in ["/split/m-00001-of-00002.gguf", "/split/m-00002-of-00002.gguf"]:
        sd = gpunvme.load_pretrained(models.uri, shard, framework="numpy")
        assert list(sd) == [t[0] for t in models.split_t]
        for name, ty, ne, data in models.split_t:
            assert sd[name].shape == (2, 4) and raw(sd[name]) == data


# ---- Volume and ownership ------------------------------------------------------------------


def test_volume_reuse_listdir_stat(models):
    with gpunvme.Volume(models.uri) as vol:
        assert vol.fs_type == "ext4"
        assert sorted(vol.listdir("/hf")) == ["model-00001-of-00002.safetensors",
                                              "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
        st = vol.stat("/m/big.safetensors")
        assert st["type"] == "file" and st["size"] > 6 * 64 * 1024 * 4
        assert vol.stat("/m")["type"] == "dir"
        a = gpunvme.load_file(vol, "/m/big.safetensors", framework="np", tensors=["layer.1.w"])
        b = gpunvme.load_pretrained(vol, "/hf", framework="np")
        with gpunvme.safe_open(vol, "/m/every.safetensors", framework="np") as f:
            c = f.get_tensor("dtype.U64")
        assert not vol.closed  # safe_open on a Volume leaves it open
    assert vol.closed
    with pytest.raises(gpunvme.Error) as e:
        vol.listdir("/")
    assert e.value.errno == errno.EBADF
    assert raw(a["layer.1.w"]) == models.big_data["layer.1.w"]
    assert raw(b["a.w"]) == models.hf_data["a.w"]
    assert raw(c) == models.st_data["dtype.U64"]


def test_tensors_outlive_volume(models):
    vol = gpunvme.Volume(models.uri)
    sd = gpunvme.load_file(vol, "/m/big.safetensors", framework="np")
    view = sd["layer.3.w"][10:20]
    vol.close()
    del vol, sd
    gc.collect()
    # the loader memory is still held by the view
    assert raw(view) == np.frombuffer(models.big_data["layer.3.w"], np.float32).reshape(64, 1024)[10:20].tobytes()


def test_dlpack_capsule_protocol(models):
    vol = gpunvme.Volume(models.uri)
    model = vol.open_model("/m/every.safetensors")
    ld = gpunvme._gpunvme.Loader(model, 0)
    bufs = ld.select([0, 1])
    with pytest.raises(gpunvme.Error):
        gpunvme._gpunvme.Tensor(bufs, 0)  # not loaded yet
    bufs.load()
    t = gpunvme._gpunvme.Tensor(bufs, 1)
    assert t.__dlpack_device__() == (1, 0)
    cap = t.__dlpack__()
    assert "dltensor" in repr(cap)
    del cap  # never consumed: the capsule's destructor frees it
    a = np.from_dlpack(t)
    b = np.from_dlpack(t)
    assert a.dtype == np.uint8 and a.nbytes == t.nbytes and a.ctypes.data == b.ctypes.data == t.data_ptr
    del vol, model, ld, bufs, t
    gc.collect()
    assert a.tobytes() == models.st_data["dtype.U8"] and b.tobytes() == a.tobytes()


def _rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def test_no_leak_1000_loads(models):
    vol = gpunvme.Volume(models.uri)

    def once():
        sd = gpunvme.load_file(vol, "/m/every.safetensors", framework="np", tensors=["dtype.F32", "weird*,[name]"])
        assert raw(sd["dtype.F32"]) == models.st_data["dtype.F32"]
        with gpunvme.safe_open(vol, "/m/q.gguf", framework="np") as f:
            f.get_tensor("q4")

    for _ in range(100):
        once()
    gc.collect()
    before = _rss_kib()
    for _ in range(1000):
        once()
    gc.collect()
    grown = _rss_kib() - before
    vol.close()
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return  # ASan's quarantine keeps freed memory: RSS says nothing there
    assert grown < 4096, "RSS grew %d KiB over 1000 loads" % grown


@pytest.mark.parametrize("keep", ["0", "10"])
def test_uri_loads_close_their_volume(models, monkeypatch, keep):
    # load_file(uri) opens and closes a controller each time (the volume
    # cache off), or keeps one for the next call: no leak of emulators,
    # threads or queue pairs either way
    monkeypatch.setenv("GPUNVME_VOLUME_CACHE_S", keep)
    gpunvme.release_volumes()
    for _ in range(20):
        sd = gpunvme.load_file(models.uri, "/hf1/model.safetensors", framework="np")
    assert raw(sd["x"]) == models.single_data["x"]
    gpunvme.release_volumes()


# ---- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path,code", [
    ("/m/missing.safetensors", errno.ENOENT),
    ("/bad/notamodel.safetensors", errno.EINVAL),
    ("/bad/trunc.safetensors", errno.EINVAL),
    ("/bad/empty.safetensors", None),
    ("/bad/torch", errno.ENOTSUP),
    ("/bad/empty", None),
    ("/hf1/config.json", None),
])
def test_bad_files(models, path, code):
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(models.uri, path, framework="numpy")
    assert isinstance(e.value, OSError) and e.value.strerror
    assert path.split("/")[-1] in e.value.strerror or path in e.value.strerror
    if code is not None:
        assert e.value.errno == code, e.value.strerror
    with pytest.raises(gpunvme.Error):
        gpunvme.load_pretrained(models.uri, path, framework="numpy")


def test_bad_uris(models, tmp_path):
    for uri in ["emu:/no/such/image.img", "nvme:xyz", "emu:ram:1G"]:
        with pytest.raises(gpunvme.Error) as e:
            gpunvme.load_file(uri, "/m/every.safetensors", framework="numpy")
        assert e.value.strerror
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(models.img, "/m/every.safetensors", framework="numpy")
    assert "emu:" in e.value.strerror
    with pytest.raises(gpunvme.Error):
        gpunvme.Volume(models.uri, nsid=2)
    with pytest.raises(gpunvme.Error):
        gpunvme.Volume(models.uri, offset=1 << 40)
    with pytest.raises(gpunvme.Error):
        gpunvme.Volume(models.uri, offset=4096)  # no file system there
    with pytest.raises(gpunvme.Error):
        gpunvme.Volume(models.uri, partition=1)  # no partition table


def test_bad_arguments(models):
    u, p = models.uri, "/m/every.safetensors"
    for kw in [dict(framework="tf"), dict(framework="numpy", device="tpu"), dict(framework="numpy", device="cuda:x"),
               dict(framework="numpy", tier=3), dict(framework="numpy", tier=2),
               dict(framework="numpy", tensors=["nope"]), dict(framework="numpy", queues=0),
               dict(framework="numpy", queues=65), dict(framework="numpy", depth=1),
               dict(framework="numpy", depth=5000)]:
        with pytest.raises(gpunvme.Error):
            gpunvme.load_file(u, p, **kw)
    with pytest.raises(TypeError):
        gpunvme.load_file(u, p, framework="numpy", depth="8")
    # explicit queue settings load the same bytes as the defaults
    a = gpunvme.load_file(u, p, framework="numpy")
    b = gpunvme.load_file(u, p, framework="numpy", queues=1, depth=2)
    assert a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
    with pytest.raises(TypeError):
        gpunvme.load_file(u, 42, framework="numpy")
    with pytest.raises(TypeError):
        gpunvme.load_file(u, p, framework="numpy", tensors=[1])
    with pytest.raises(TypeError):
        gpunvme.Volume(None)
    with gpunvme.safe_open(u, p, framework="numpy") as f:
        with pytest.raises(gpunvme.Error):
            f.get_slice("nope")


def test_cuda_without_backend_or_gpu(models):
    if gpunvme.HAVE_CUDA:
        if gpunvme.cuda_available():
            pytest.skip("a GPU is here: test_gpu.py covers device=\"cuda\"")
        # the backend is in, no GPU: the loader says so
        with pytest.raises(gpunvme.Error):
            gpunvme.load_file(models.uri, "/m/every.safetensors", device="cuda", framework="numpy")
    else:
        with pytest.raises(gpunvme.Error) as e:
            gpunvme.load_file(models.uri, "/m/every.safetensors", device="cuda", framework="numpy")
        assert "GPUNVME_CUDA=ON" in e.value.strerror


def test_torch_missing_is_an_error(models):
    try:
        import torch  # noqa: F401
        pytest.skip("torch is installed")
    except ImportError:
        pass
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(models.uri, "/m/every.safetensors")
    assert "torch" in e.value.strerror


def test_partitioned_disk(tmp_path):
    rng = np.random.default_rng(5)
    st, data = st_bytes([("p.w", "F32", (4, 4), rand_bytes(rng, 64))])
    uri = make_image(tmp_path, {"/m/p.safetensors": st})
    fs_img = uri[len("emu:"):]
    # one file system, in partition 2: the URI alone finds it
    disk, starts = _gpt_disk(tmp_path, fs_img, [2])
    sd = gpunvme.load_file(disk, "/m/p.safetensors", framework="numpy")
    assert sd["p.w"].tobytes() == data["p.w"]
    sd = gpunvme.load_file(disk, "/m/p.safetensors", framework="numpy", partition=2)
    assert sd["p.w"].tobytes() == data["p.w"]
    sd = gpunvme.load_file(disk, "/m/p.safetensors", framework="numpy", offset=starts[1] * 512)
    assert sd["p.w"].tobytes() == data["p.w"]
    with pytest.raises(gpunvme.Error) as e:  # partition 1 is empty
        gpunvme.load_file(disk, "/m/p.safetensors", framework="numpy", partition=1)
    assert e.value.strerror
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(disk, "/m/p.safetensors", framework="numpy", partition=7)
    assert "7" in e.value.strerror
    with pytest.raises(gpunvme.Error):
        gpunvme.load_file(disk, "/m/p.safetensors", framework="numpy", partition=2, offset=0)
    with pytest.raises(gpunvme.Error):
        gpunvme.Volume(disk, partition=0)
    with pytest.raises(gpunvme.Error):
        gpunvme.Volume(disk, partition=True)


def test_partitioned_disk_ambiguous(tmp_path):
    rng = np.random.default_rng(6)
    st, data = st_bytes([("q.w", "I8", (8,), rand_bytes(rng, 8))])
    uri = make_image(tmp_path, {"/q.safetensors": st})
    disk, _ = _gpt_disk(tmp_path, uri[len("emu:"):], [1, 2])
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(disk, "/q.safetensors", framework="numpy")
    assert "--partition" in e.value.strerror or "partition" in e.value.strerror
    with gpunvme.Volume(disk, partition=1) as v:
        assert gpunvme.load_file(v, "/q.safetensors", framework="numpy")["q.w"].tobytes() == data["q.w"]


def test_load_step_fixed(tmp_path):
    """GPUNVME_LOAD_STEP_MB=N: steps of N MiB (the profile line counts them),
    every byte still right; unset, a 5 MiB file is one step; a value that is
    not a size is named on stderr and ignored (read once per process: a
    child each)"""
    import subprocess
    import sys
    rng = np.random.default_rng(41)
    st, data = st_bytes([("t%d" % i, "U8", (1 << 20,), rand_bytes(rng, 1 << 20)) for i in range(5)])
    uri = make_image(tmp_path, {"/s.safetensors": st})
    want = tmp_path / "want.bin"
    want.write_bytes(b"".join(data["t%d" % i] for i in range(5)))
    code = ("import gpunvme, sys; sd = gpunvme.load_file(%r, '/s.safetensors', framework='numpy'); "
            "got = b''.join(sd['t%%d' %% i].tobytes() for i in range(5)); "
            "sys.exit(0 if got == open(%r, 'rb').read() else 3)" % (uri, str(want)))
    for step, steps, warn in (("1", range(5, 8), False), (None, range(1, 2), False), ("8M", range(1, 2), True),
                              ("0", range(1, 2), True)):
        e = {k: v for k, v in os.environ.items() if k != "GPUNVME_LOAD_STEP_MB"}
        e["GPUNVME_LOAD_PROFILE"] = "1"
        if step is not None:
            e["GPUNVME_LOAD_STEP_MB"] = step
        p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (step, p.stderr)
        line = [ln for ln in p.stderr.splitlines() if ln.startswith("gpunvme load profile:")][0]
        n = int(line.split(" steps, ")[0].rsplit(" ", 1)[1])
        assert n in steps, (step, line)
        assert ("GPUNVME_LOAD_STEP_MB=%s is not a size" % step in p.stderr) == warn, (step, p.stderr)


def test_load_profile_lines(models):
    """GPUNVME_LOAD_PROFILE=1: a line per selection after each load, with its
    runs, steps and the host's time queueing and waiting; none without it
    (read once per process: a child each)"""
    import subprocess
    import sys
    code = ("import gpunvme; sd = gpunvme.load_file(%r, '/m/big.safetensors', framework='numpy'); "
            "print(len(sd))" % models.uri)
    for env, want in (({"GPUNVME_LOAD_PROFILE": "1"}, True), ({"GPUNVME_LOAD_PROFILE": "0"}, False), ({}, False)):
        e = {k: v for k, v in os.environ.items() if k != "GPUNVME_LOAD_PROFILE"}
        e.update(env)
        p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("gpunvme load profile:")]
        if not want:
            assert not lines, (env, p.stderr)
            continue
        assert len(lines) == 1, p.stderr
        assert "/m/big.safetensors, tier 0 device 0:" in lines[0]
        assert " runs, " in lines[0] and " steps, " in lines[0] and "queueing " in lines[0] and "waiting " in lines[0]
