# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme on md RAID0 arrays (md: URIs): an ext4 image striped into member
images with md 1.2 superblocks (bench/md_mkraid0.py lays them out as mdadm
does), every member its own emulated controller, members given in any order;
the tensors compared with the bytes written; refusals as gpunvme.Error."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpunvme
from conftest import make_image, rand_bytes, st_bytes

MKRAID0 = Path(__file__).resolve().parents[2] / "bench" / "md_mkraid0.py"


def raw(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@pytest.fixture
def array(tmp_path):
    rng = np.random.default_rng(17)
    blob, data = st_bytes([("w", "F32", [384, 1024], rand_bytes(rng, 384 * 1024 * 4)),
                           ("b", "U8", [4099], rand_bytes(rng, 4099)),
                           ("e", "I16", [0, 3], b"")])
    uri = make_image(tmp_path, {"/m/model.safetensors": blob})
    img = uri[len("emu:"):]
    subprocess.run([sys.executable, str(MKRAID0), img, "4", "64", str(tmp_path / "m")], check=True,
                   stdout=subprocess.DEVNULL)
    members = ["emu:%s" % (tmp_path / ("m%d.img" % k)) for k in range(4)]
    return members, data


def test_md_load_file_any_order(array):
    members, data = array
    for order in ([3, 1, 0, 2], [0, 1, 2, 3]):
        uri = "md:" + ";".join(members[k] for k in order)
        sd = gpunvme.load_file(uri, "/m/model.safetensors", framework="numpy")
        assert sorted(sd) == sorted(data)
        for name, want in data.items():
            assert raw(sd[name]) == want, name
    with gpunvme.Volume("md:" + ";".join(reversed(members))) as v:
        assert v.exists("/m/model.safetensors")


def test_md_refusals(array):
    members, _ = array
    with pytest.raises(gpunvme.Error, match="slot 3 missing"):
        gpunvme.Volume("md:" + ";".join(members[:3]))
    with pytest.raises(gpunvme.Error, match="empty member"):
        gpunvme.Volume("md:%s;;%s" % (members[0], members[1]))
    with pytest.raises(gpunvme.Error, match="same namespace"):
        gpunvme.Volume("md:%s;%s;%s;%s" % (members[0], members[0], members[1], members[2]))
