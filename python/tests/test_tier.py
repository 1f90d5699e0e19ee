# SPDX-License-Identifier: BSD-2-Clause
"""The one tier policy (include/gpunvme/tier.h) as Python sees it: device=
"cuda" without a tier asks the policy (Tier 2 on the emulator, Tier 1 on a
controller that cannot DMA into GPU memory: NVMe/TCP here, vfio: on
hardware), and an explicit tier the volume cannot do is refused with the
library's reason before any GPU is touched, so this runs without one.

NVMe/TCP comes from the suite's fake target (tests/nvmf): its binary from
$GPUNVME_FAKE_TARGET or build/bin; the tests that need it skip without."""
import errno
import os
import subprocess

import numpy as np
import pytest

import gpunvme
from conftest import make_image, st_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFUSAL = "tier 2 (GPU memory) needs a controller that can DMA into GPU memory"


@pytest.fixture
def model_img(tmp_path):
    data = np.arange(4096, dtype=np.float32).tobytes()
    blob, _ = st_bytes([("w", "F32", (4096,), data)])
    return make_image(tmp_path, {"/m.safetensors": blob}), data


@pytest.fixture
def tcp_uri(model_img):
    ft = os.environ.get("GPUNVME_FAKE_TARGET") or os.path.join(ROOT, "build", "bin", "gpunvme-fake-target")
    if not os.access(ft, os.X_OK):
        pytest.skip("no gpunvme-fake-target (build it: cmake --build build --target gpunvme-fake-target, "
                    "or set GPUNVME_FAKE_TARGET)")
    img = model_img[0][len("emu:"):]
    # the target runs until its stdin closes; its first line is "port P nqn NQN"
    p = subprocess.Popen([ft, "--image", img], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        words = p.stdout.readline().split()
        assert words[:1] == ["port"] and words[2:3] == ["nqn"], words
        yield "tcp://127.0.0.1:%s/%s" % (words[1], words[3])
    finally:
        p.stdin.close()
        p.wait(timeout=10)


def test_emu_auto_is_tier_2(model_img):
    with gpunvme.Volume(model_img[0]) as v:
        assert v.tier_choose(gpunvme.TIER_AUTO) == 2
        assert v.tier_choose(2) == 2
        assert v.tier_choose(1) == 1
        assert v.tier_choose(0) == 0


def test_tcp_auto_is_tier_1_and_tier_2_is_refused(tcp_uri):
    with gpunvme.Volume(tcp_uri) as v:
        assert v.tier_choose(gpunvme.TIER_AUTO) == 1
        assert v.tier_choose(1) == 1
        assert v.tier_choose(0) == 0
        with pytest.raises(gpunvme.Error) as e:
            v.tier_choose(2)
        assert e.value.errno == errno.EOPNOTSUPP
        msg = str(e.value)
        assert REFUSAL in msg and "tcp:" in msg and "use tier 1" in msg and "tier=1" in msg, msg


def test_load_file_tier_2_refused_on_tcp(tcp_uri):
    if not gpunvme.HAVE_CUDA:
        pytest.skip("built without CUDA: device=\"cuda\" is refused for that first")
    # refused by the policy before a loader (or a GPU) is touched
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.load_file(tcp_uri, "/m.safetensors", device="cuda", tier=2, framework="numpy")
    assert e.value.errno == errno.EOPNOTSUPP and REFUSAL in str(e.value), str(e.value)
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.safe_open(tcp_uri, "/m.safetensors", framework="numpy", device="cuda", tier=2)
    assert REFUSAL in str(e.value)


def test_tcp_cpu_tier_loads(tcp_uri, model_img):
    sd = gpunvme.load_file(tcp_uri, "/m.safetensors", device="cpu", framework="numpy")
    assert sd["w"].tobytes() == model_img[1]
