# SPDX-License-Identifier: BSD-2-Clause
"""Where the Python API met a new user's inputs (issue 30, items 4 and 5):
slices of sub-byte and zero-size tensors, non-UTF-8 file names, Ctrl-C
during a load, Volume.read's arguments, and the packaging files git keeps.
CPU tier, numpy; every byte compared with what was written."""
import errno
import os
import pathlib
import shutil
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import gpunvme
from conftest import make_image, rand_bytes, st_bytes

REPO = pathlib.Path(__file__).resolve().parents[2]


def raw(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


# ---- a. slices of sub-byte dtypes --------------------------------------------------------


def test_get_slice_sub_byte_rows(models):
    """F4 / F6_* come back as packed bytes; a slice is the packed bytes of
    the elements it names (the safetensors reference's slice.rs), and one
    that starts or ends inside a byte is refused, naming the dtype"""
    d = models.st_data
    with gpunvme.safe_open(models.uri, "/m/every.safetensors", framework="numpy") as f:
        f4 = f.get_slice("dtype.F4")  # (4, 6): 24 bits a row, 3 bytes
        assert f4.get_shape() == [4, 6] and f4.get_dtype() == "F4"
        b = d["dtype.F4"]
        assert len(b) == 12
        cols01 = b[0:1] + b[3:4] + b[6:7] + b[9:10]  # elements 0-1 of each row: 1 byte
        want = [(np.s_[0:2], b[0:6]), (np.s_[1], b[3:6]), (np.s_[-1], b[9:12]), (np.s_[2:], b[6:12]),
                (np.s_[:], b), (np.s_[...], b), (np.s_[1:3, :], b[3:9]), (np.s_[:, 0:2], cols01),
                (np.s_[2:4, 2:6], b[7:9] + b[10:12]), (np.s_[3, 4:], b[11:12]), (np.s_[..., 0:2], cols01),
                (np.s_[1:1], b""), (np.s_[3:1], b""), (np.s_[0:100], b)]
        for idx, w in want:
            got = f4[idx]
            assert got.dtype == np.uint8 and got.ndim == 1, idx
            assert got.tobytes() == w, idx
        for bad in [np.s_[:, 1:2], np.s_[0, 1], np.s_[::2], np.s_[:, 0:3]]:
            with pytest.raises(gpunvme.Error) as e:
                f4[bad]
            assert e.value.errno == errno.EINVAL and "F4" in str(e.value), bad
        with pytest.raises(gpunvme.Error) as e:
            f4[[0, 1]]
        assert e.value.errno == errno.ENOTSUP and "F4" in str(e.value)
        with pytest.raises(IndexError):
            f4[4]
        with pytest.raises(IndexError):
            f4[0, 0, 0]
        for dt in ["F6_E2M3", "F6_E3M2"]:  # (4, 6): 36 bits a row
            s6, b6 = f.get_slice("dtype." + dt), d["dtype." + dt]
            assert len(b6) == 18
            assert s6[0:2].tobytes() == b6[0:9] and s6[2:4].tobytes() == b6[9:18] and s6[:].tobytes() == b6
            for bad in [np.s_[1], np.s_[0:1], np.s_[1:3], np.s_[:, 0:4]]:
                with pytest.raises(gpunvme.Error) as e:
                    s6[bad]
                assert e.value.errno == errno.EINVAL and dt in str(e.value) and "byte" in str(e.value), (dt, bad)


# ---- b. slices of zero-size tensors ------------------------------------------------------------


@pytest.fixture(scope="module")
def empties(tmp_path_factory):
    st, _ = st_bytes([("bf", "BF16", (4, 0), b""), ("f", "F32", (0, 5), b""), ("f4", "F4", (4, 0), b""),
                      ("x", "I8", (2,), b"\x01\x02")])
    return make_image(tmp_path_factory.mktemp("empties"), {"/e.safetensors": st})


def test_get_slice_zero_size(empties):
    """numpy's empty results, of numpy's shape, as get_tensor gives them
    (select_bytes refused the empty part: Error(EINVAL))"""
    with gpunvme.safe_open(empties, "/e.safetensors", framework="numpy") as f:
        full = f.get_tensor("bf")
        assert full.shape == (4, 0) and full.dtype == np.uint16
        sl = f.get_slice("bf")
        ref = np.empty((4, 0), np.uint16)
        for idx in [np.s_[:], np.s_[0], np.s_[1:3], np.s_[-1], np.s_[1:3, 0:0], np.s_[..., :], np.s_[3:1]]:
            got = sl[idx]
            assert got.shape == ref[idx].shape and got.dtype == np.uint16, idx
        with pytest.raises(IndexError):
            sl[4]
        sl = f.get_slice("f")
        assert sl[:].shape == (0, 5) and sl[0:3].shape == (0, 5)
        assert f.get_slice("f4")[0:2].tobytes() == b""


# ---- c. file names that are not UTF-8 --------------------------------------------------------------


@pytest.fixture(scope="module")
def latin1(tmp_path_factory):
    rng = np.random.default_rng(5)
    st, data = st_bytes([("w", "F32", (3, 4), rand_bytes(rng, 48))])
    # b"caf\xe9" is Latin-1: as a str (os.fsdecode) it is 'caf\udce9'
    files = {"/caf\udce9/m\udcff.safetensors": st, "/caf\udce9/notes.txt": b"0123456789" * 30}
    return make_image(tmp_path_factory.mktemp("latin1"), files), st, data


def test_non_utf8_names(latin1):
    uri, st, data = latin1
    name_s = "/caf\udce9/m\udcff.safetensors"
    name_b = b"/caf\xe9/m\xff.safetensors"
    with gpunvme.Volume(uri) as vol:
        assert "caf\udce9" in vol.listdir("/")
        # what listdir gives back, and the same name as bytes or a PathLike
        for d in ["/caf\udce9", b"/caf\xe9", pathlib.PurePosixPath("/caf\udce9")]:
            assert sorted(vol.listdir(d)) == ["m\udcff.safetensors", "notes.txt"], d
        listed = "/caf\udce9/" + [n for n in vol.listdir("/caf\udce9") if n.endswith(".safetensors")][0]
        for p in [name_s, name_b, pathlib.PurePosixPath(name_s), listed]:
            assert vol.exists(p), p
            assert vol.stat(p)["size"] == len(st), p
            assert vol.read(p) == st, p
        assert vol.read(b"/caf\xe9/notes.txt", 5, 3) == b"567"
        for p in [name_s, name_b]:
            sd = gpunvme.load_file(vol, p, framework="numpy")
            assert raw(sd["w"]) == data["w"]
            with gpunvme.safe_open(vol, p, framework="numpy") as f:
                assert raw(f.get_tensor("w")) == data["w"]
                assert raw(f.get_slice("w")[1:3]) == data["w"][16:48]
            assert raw(gpunvme.load_pretrained(vol, p, framework="numpy")["w"]) == data["w"]
        # errors name the path, its odd bytes escaped, not a UnicodeDecodeError
        for p in ["/caf\udce9/gone\udcff", b"/caf\xe9/gone\xff"]:
            with pytest.raises(gpunvme.Error) as e:
                vol.stat(p)
            assert e.value.errno == errno.ENOENT and "gone\\xff" in str(e.value)
            assert not vol.exists(p)
        with pytest.raises(gpunvme.Error) as e:
            gpunvme.load_file(vol, "/caf\udce9/gone\udcff", framework="numpy")
        assert e.value.errno == errno.ENOENT
        with pytest.raises(gpunvme.Error) as e:
            gpunvme.load_file(vol, name_b, framework="numpy", tensors=["nope"])
        assert e.value.errno == errno.ENOENT and str(e.value).count("m\udcff.safetensors: no tensor named 'nope'")
        with pytest.raises(gpunvme.Error) as e:
            vol.stat("/caf\0")
        assert e.value.errno == errno.EINVAL and "NUL" in str(e.value)
        for bad in [7, None, 1.5]:
            with pytest.raises(TypeError):
                vol.stat(bad)
            with pytest.raises(TypeError):
                gpunvme.load_file(vol, bad, framework="numpy")
    # a URI string: load_file opens the volume itself
    assert raw(gpunvme.load_file(uri, name_b, framework="numpy")["w"]) == data["w"]


# ---- d. Ctrl-C during load_file ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    """48 MiB of tensors; read at 24 MB/s (the emulator's read_mbps) a load
    takes about 2.1 s"""
    rng = np.random.default_rng(9)
    ts = [("t.%d" % i, "U8", (6 << 20,), rand_bytes(rng, 6 << 20)) for i in range(8)]
    st, data = st_bytes(ts)
    return make_image(tmp_path_factory.mktemp("slow"), {"/slow.safetensors": st}), data


def interrupted(after_s, load):
    """load() with Ctrl-C (SIGINT) after after_s seconds: it must raise
    KeyboardInterrupt and return nothing (no partial result) -> seconds it
    took"""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # what Ctrl-C raises
    timer = threading.Timer(after_s, os.kill, (os.getpid(), signal.SIGINT))
    got = "nothing"
    try:
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            got = load()
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, old)
    assert got == "nothing"
    return took


def test_ctrl_c_stops_load_file(slow_model):
    img_uri, data = slow_model
    slow = img_uri + "?read_mbps=24"
    t0 = time.monotonic()
    sd = gpunvme.load_file(slow, "/slow.safetensors", framework="numpy")
    full = time.monotonic() - t0
    assert full > 1.7, "the emulator did not slow the load (%.2f s): the test would prove nothing" % full
    assert raw(sd["t.7"]) == data["t.7"]
    del sd
    took = interrupted(0.4, lambda: gpunvme.load_file(slow, "/slow.safetensors", framework="numpy"))
    # a step takes ~0.35 s here: stopped within two of them, not at the end
    assert took < 0.6 * full, "KeyboardInterrupt after %.2f s of a %.2f s load" % (took, full)
    # the volume and the library are fine afterwards
    with gpunvme.Volume(img_uri) as vol:
        sd = gpunvme.load_file(vol, "/slow.safetensors", framework="numpy", tensors=["t.0", "t.5"])
        assert raw(sd["t.0"]) == data["t.0"] and raw(sd["t.5"]) == data["t.5"]


def test_ctrl_c_stops_replicas(slow_model):
    """replicas (a volume per device, loads in threads of their own; CPU-tier
    loaders standing in for GPUs): Ctrl-C stops every volume's load within a
    step, raises KeyboardInterrupt in the caller, and leaves no load thread
    behind"""
    img_uri, data = slow_model
    slow = img_uri + "?read_mbps=24"
    devs = [(0, 0, "cpu0"), (0, 0, "cpu1")]
    with gpunvme.Volume(slow) as v0, gpunvme.Volume(slow) as v1:
        ms = [v0.open_model("/slow.safetensors"), v1.open_model("/slow.safetensors")]
        sel = list(gpunvme._index(ms[0]).values())
        t0 = time.monotonic()
        sd = gpunvme._load_multi(ms, sel, devs, "size", 0, "np", False, "slow", None, None)
        full = time.monotonic() - t0
        assert all(raw(sd[n]) == data[n] for n in data)
        del sd
        # each volume reads half at 24 MB/s, at the same time
        assert full > 0.8, "the emulator did not slow the load (%.2f s): the test would prove nothing" % full
        threads = threading.active_count()
        took = interrupted(0.3, lambda: gpunvme._load_multi(ms, sel, devs, "size", 0, "np", False, "slow", None, None))
        assert took < 0.75 * full, "KeyboardInterrupt after %.2f s of a %.2f s load" % (took, full)
        assert threading.active_count() == threads, "a thread outlived the call: %s" % [t.name for t in threading.enumerate()]
        # the volumes are fine afterwards
        sd = gpunvme._load_multi(ms, sel[:2], devs, "layers", 0, "np", False, "slow", None, None)
        assert raw(sd["t.0"]) == data["t.0"] and raw(sd["t.1"]) == data["t.1"]


def test_replica_failure_stops_the_others(slow_model, tmp_path):
    """replicas: a read failure on one volume (its image cut short under
    it: Unrecovered Read Error) ends the other volume's load at its step
    too, and the failure is what is raised, not the stop it caused"""
    img_uri, data = slow_model
    img = img_uri[len("emu:"):]
    cut = str(tmp_path / "cut.img")
    shutil.copy(img, cut)
    devs = [(0, 0, "cpu0"), (0, 0, "cpu1")]
    with gpunvme.Volume(img_uri + "?read_mbps=24") as v0, gpunvme.Volume("emu:%s?read_mbps=24" % cut) as v1:
        ms = [v0.open_model("/slow.safetensors"), v1.open_model("/slow.safetensors")]
        sel = list(gpunvme._index(ms[0]).values())
        t0 = time.monotonic()
        gpunvme._load_multi(ms, sel, devs, "size", 0, "np", False, "slow", None, None)
        full = time.monotonic() - t0
        assert full > 0.8, "the emulator did not slow the load (%.2f s): the test would prove nothing" % full
        timer = threading.Timer(0.3, os.truncate, (cut, 1 << 20))
        got = "nothing"
        try:
            t0 = time.monotonic()
            timer.start()
            with pytest.raises(gpunvme.Error, match="Unrecovered Read Error") as e:
                got = gpunvme._load_multi(ms, sel, devs, "size", 0, "np", False, "slow", None, None)
            took = time.monotonic() - t0
        finally:
            timer.cancel()
            timer.join()
        assert got == "nothing" and e.value.errno == errno.EIO
        assert took < 0.75 * full, "the failure was raised after %.2f s of a %.2f s load" % (took, full)


# ---- e. Volume.read's arguments -----------------------------------------------------------------------


def test_volume_read_arguments(models):
    with gpunvme.Volume(models.uri) as vol:
        whole = vol.read("/hf1/config.json")
        assert whole == b"{}"
        st = vol.read("/m/every.safetensors")
        assert vol.read("/m/every.safetensors", offset=100, size=10) == st[100:110]
        assert vol.read(path="/m/every.safetensors", size=8) == st[:8]
        assert vol.read("/m/every.safetensors", 100, size=-1) == st[100:]
        assert vol.read("/m/every.safetensors", offset=len(st) + 5) == b""
        assert vol.read("/m/every.safetensors", 0, 0) == b""
        assert vol.read("/m/every.safetensors", np.int64(4), np.int32(4)) == st[4:8]
        for args, kw, name, code in [(( -5, 10), {}, "offset", errno.EINVAL), ((0, -2), {}, "size", errno.EINVAL),
                                     ((), {"offset": -1}, "offset", errno.EINVAL),
                                     ((), {"size": -(2 ** 70)}, "size", errno.EINVAL),
                                     ((), {"offset": 2 ** 70}, "offset", errno.ERANGE),
                                     ((), {"offset": 2 ** 63}, "offset", errno.ERANGE),
                                     ((), {"size": 2 ** 70}, "size", errno.ERANGE)]:
            with pytest.raises(gpunvme.Error) as e:
                vol.read("/m/every.safetensors", *args, **kw)
            assert e.value.errno == code and name in str(e.value), (args, kw)
        for bad in [{"offset": 1.5}, {"size": "3"}, {"nope": 1}]:
            with pytest.raises(TypeError):
                vol.read("/m/every.safetensors", **bad)


# ---- f. packaging: build outputs are not in git, and are ignored ---------------------------------------


def _git(*args):
    return subprocess.run(["git", "-C", str(REPO)] + list(args), capture_output=True, text=True)


@pytest.fixture
def checkout():
    if not shutil.which("git") or _git("rev-parse", "--git-dir").returncode:
        pytest.skip("not a git checkout")


def test_packaging_outputs_untracked_and_ignored(checkout):
    tracked = _git("ls-files", "python").stdout.split()
    assert tracked and not [p for p in tracked if ".egg-info" in p or p.endswith(".so") or "/build/" in p]
    # where `make python` (pip install ./python), setup.py build_ext --inplace
    # and pytest really write
    outputs = ["python/src/gpunvme.egg-info/PKG-INFO", "python/build/lib.linux-x86_64-cpython-311/x.so",
               "python/build/temp.linux-x86_64-cpython-311/cmake/CMakeCache.txt",
               "python/src/gpunvme/_gpunvme.cpython-311-x86_64-linux-gnu.so", "python/src/gpunvme/_gpunvme.abi3.so",
               "python/tests/__pycache__/x.pyc", "build/pyvenv/bin/python"]
    r = _git("check-ignore", "--no-index", *outputs)
    assert sorted(r.stdout.split()) == sorted(outputs), "not ignored: %s" % (set(outputs) - set(r.stdout.split()))
    # sources stay visible
    for src in ["python/src/gpunvme/__init__.py", "python/setup.py", "python/tests/test_edges.py"]:
        assert _git("check-ignore", "--no-index", "-q", src).returncode == 1, src
    # what the builds left in this checkout shows nowhere in git status
    left = _git("status", "--porcelain", "--untracked-files=all", "--", "python/build", "python/src").stdout
    assert not [l for l in left.splitlines() if l.startswith("??") and not l.endswith((".py", ".c"))], left


def test_make_clean_removes_only_build_outputs(checkout):
    if not shutil.which("make"):
        pytest.skip("no make")
    r = subprocess.run(["make", "-n", "-C", str(REPO), "clean"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    words = [w for line in r.stdout.splitlines() if line.split()[:1] == ["rm"] for w in line.split()[1:]
             if not w.startswith("-")]
    assert words, r.stdout
    for w in words:
        assert not _git("ls-files", "--", w).stdout, "make clean removes tracked files: %s" % w


def test_import_leaves_the_environment():
    """the module chooses where the emulator's GPU copies run without the
    environment, so programs it starts (the CLI) keep their own default"""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "GPUNVME_EMU_DMA"}
    # what a program started after the import sees (the C-level
    # environment: os.environ is a copy taken at start-up)
    code = ("import subprocess, gpunvme; "
            "print(subprocess.run(['sh', '-c', 'echo x$GPUNVME_EMU_DMA'], capture_output=True, text=True).stdout)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "x", r.stdout
