# SPDX-License-Identifier: BSD-2-Clause
"""The volume cache (_volumes.py): a volume that load_file / load_pretrained
/ safe_open opened from an emu: image URI is kept idle a few seconds and
taken by the next call with the same URI, never when the image changed,
never for a URI that is not one image file, never after a failed call."""
import errno
import os
import time

import numpy as np
import pytest

import gpunvme
from gpunvme import _volumes
from conftest import make_image, rand_bytes, st_bytes


def raw(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def image(tmp_path, seed, name="img.ext4"):
    rng = np.random.default_rng(seed)
    data, tensors = st_bytes([("w", "F32", (64, 256), rand_bytes(rng, 64 * 256 * 4)),
                              ("b", "U8", (3000,), rand_bytes(rng, 3000))])
    return make_image(tmp_path, {"/m.safetensors": data}, name=name), tensors


def idle():
    with _volumes._cache_lock:
        return {k[0]: v[0] for k, v in _volumes._idle.items()}


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("GPUNVME_VOLUME_CACHE_S", raising=False)
    gpunvme.release_volumes()
    yield
    gpunvme.release_volumes()


def check(sd, tensors):
    assert sorted(sd) == sorted(tensors)
    for k, v in tensors.items():
        assert raw(sd[k]) == v, k


def test_second_call_takes_the_same_volume(tmp_path):
    uri, t = image(tmp_path, 1)
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    v1 = idle()[uri]
    assert not v1.closed
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    assert idle()[uri] is v1
    # safe_open and load_pretrained take it too, and give it back at close
    with gpunvme.safe_open(uri, "/m.safetensors", framework="np") as f:
        assert uri not in idle()  # in use: in no table
        assert raw(f.get_tensor("b")) == t["b"]
    assert idle()[uri] is v1
    check(gpunvme.load_pretrained(uri, "/m.safetensors", framework="np"), t)
    assert idle()[uri] is v1


def test_other_options_other_volume(tmp_path):
    uri, t = image(tmp_path, 2)
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    check(gpunvme.load_file(uri + "?workers=1", "/m.safetensors", framework="np"), t)
    kept = idle()
    assert set(kept) == {uri, uri + "?workers=1"}
    assert kept[uri] is not kept[uri + "?workers=1"]


def test_rewritten_image_is_opened_again(tmp_path):
    # the same path, the same size, other bytes: the kept volume must not
    # serve the old file system or the old data
    uri, t1 = image(tmp_path, 3)
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t1)
    v1 = idle()[uri]
    path = uri[len("emu:"):]
    size = os.path.getsize(path)
    uri2, t2 = image(tmp_path, 4, name="other.ext4")
    os.replace(uri2[len("emu:"):], path)  # a new inode at the old path
    assert os.path.getsize(path) == size and t1["w"] != t2["w"]
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t2)
    assert v1.closed and idle()[uri] is not v1
    # rewritten in place (same inode): its bytes now t1's again
    v2 = idle()[uri]
    uri3, t3 = image(tmp_path, 3, name="third.ext4")
    with open(uri3[len("emu:"):], "rb") as src, open(path, "r+b") as dst:
        dst.write(src.read())
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t3)
    assert v2.closed and idle()[uri] is not v2


def test_image_changed_while_in_use_is_not_taken_again(tmp_path):
    # the identity is the file's before the open: a rewrite while the
    # volume is in use (safe_open holds it) makes it never taken again
    uri, t1 = image(tmp_path, 12)
    path = uri[len("emu:"):]
    uri2, t2 = image(tmp_path, 13, name="other.ext4")
    with gpunvme.safe_open(uri, "/m.safetensors", framework="np") as f:
        assert raw(f.get_tensor("w")) == t1["w"]
        v = f._vol
        with open(uri2[len("emu:"):], "rb") as src, open(path, "r+b") as dst:
            dst.write(src.read())
    assert v.closed and uri not in idle()
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t2)
    assert idle()[uri] is not v
    # and where the check at the end of a call cannot see it (the file
    # changed back and forth: other bytes, the same size), the identity
    # taken before the open still refuses the volume at the next call
    v2 = idle()[uri]
    v2._cache_ident = v2._cache_ident[:3] + (0, 0)  # as if opened before a change
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t2)
    assert v2.closed and idle()[uri] is not v2


def test_failed_call_closes_its_volume(tmp_path):
    uri, t = image(tmp_path, 5)
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(uri, "/missing.safetensors", framework="np")
    assert e.value.args[0] == errno.ENOENT
    assert uri not in idle()
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    v = idle()[uri]
    with pytest.raises(gpunvme.Error):
        gpunvme.load_file(uri, "/m.safetensors", framework="np", tensors=["nope"])
    assert v.closed and uri not in idle()


def test_not_kept(tmp_path, monkeypatch):
    uri, t = image(tmp_path, 6)
    # a RAM namespace is new at every open
    with pytest.raises(gpunvme.Error):
        gpunvme.load_file("emu:ram:64M", "/m.safetensors", framework="np")
    assert not idle()
    # a Volume given stays the caller's: nothing is kept for it
    with gpunvme.Volume(uri) as v:
        check(gpunvme.load_file(v, "/m.safetensors", framework="np"), t)
    assert not idle()
    # 0: closed after each call
    monkeypatch.setenv("GPUNVME_VOLUME_CACHE_S", "0")
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    assert not idle()


@pytest.mark.parametrize("bad", ["soon", "-1", "nan", "1e9"])
def test_bad_setting_is_refused(tmp_path, monkeypatch, bad):
    uri, _ = image(tmp_path, 7)
    monkeypatch.setenv("GPUNVME_VOLUME_CACHE_S", bad)
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(uri, "/m.safetensors", framework="np")
    assert e.value.args[0] == errno.EINVAL
    assert "GPUNVME_VOLUME_CACHE_S" in str(e.value) and "0 to 86400" in str(e.value)
    assert not idle()


@pytest.mark.parametrize("secs", ["0.2", "0.000001"])
def test_idle_volume_is_closed_after_its_time(tmp_path, monkeypatch, secs):
    # a time shorter than it takes to file the volume must still close it
    uri, t = image(tmp_path, 8)
    monkeypatch.setenv("GPUNVME_VOLUME_CACHE_S", secs)
    sd = gpunvme.load_file(uri, "/m.safetensors", framework="np")
    v = _volumes._idle[(uri, 1, None, None)][0] if secs == "0.2" else None
    deadline = time.monotonic() + 10
    while uri in idle() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uri not in idle() and (v is None or v.closed)
    check(sd, t)  # the tensors outlive it


def test_release_volumes(tmp_path):
    uri, t = image(tmp_path, 9)
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    v = idle()[uri]
    gpunvme.release_volumes()
    assert v.closed and not idle()
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    assert idle()[uri] is not v


def test_forked_child_does_not_take_the_parents(tmp_path):
    uri, t = image(tmp_path, 10)
    check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if not _volumes._idle and len(_volumes._orphans) == 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not idle()[uri].closed


def test_only_one_image_file_is_kept(tmp_path):
    uri, _ = image(tmp_path, 11)
    path = uri[len("emu:"):]
    assert _volumes._image_identity(uri) is not None
    assert _volumes._image_identity(uri + "?snapshot=1&workers=2") is not None
    for other in ("emu:ram:1G", "emu:%s?ns=%s" % (path, path), "md:%s;%s" % (uri, uri), uri + "#2",
                  "emu:" + str(tmp_path), "emu:" + path + ".missing", "emu:/dev/null", "vfio:0000:01:00.0",
                  "tcp://127.0.0.1:4420/nqn.x", "emu:"):
        assert _volumes._image_identity(other) is None, other


def test_at_most_four_kept_oldest_closed_first(tmp_path):
    uris, ts = [], []
    for k in range(6):
        uri, t = image(tmp_path, 20 + k, name="i%d.ext4" % k)
        check(gpunvme.load_file(uri, "/m.safetensors", framework="np"), t)
        uris.append(uri)
        ts.append(t)
    kept = idle()
    assert list(kept) == uris[2:], "the 4 newest, oldest first"
    first = list(kept.values())
    # taking one and giving it back makes it the newest
    check(gpunvme.load_file(uris[2], "/m.safetensors", framework="np"), ts[2])
    assert list(idle()) == uris[3:] + [uris[2]] and idle()[uris[2]] is first[0]
