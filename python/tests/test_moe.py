# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme.ExpertCache (CPU tier): experts of mixture-of-experts models read on
demand, every byte compared with what the writers here put in the file:
Mixtral's one tensor per expert, stacked experts (dimension 0), llama.cpp's
GGUF "_exps" tensors (quantized and F16, expert last in ne order); through
every kind of volume: an ext4 image, an md RAID0 striped from it, the image
in a GPT partition at an unaligned start, and the image behind the NVMe/TCP
fake target; every refusal."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpunvme
from conftest import gguf_bytes, gpt_disk, make_image, rand_bytes, st_bytes

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GPUNVME_BUILD", REPO / "build")) / "bin"
NQN = "nqn.2026-11.io.gpunvme:fake"


def mixtral(rng, layers=3, experts=4):
    t = [("model.embed_tokens.weight", "BF16", (16, 64), rand_bytes(rng, 16 * 64 * 2))]
    for l in range(layers):
        t.append(("model.layers.%d.block_sparse_moe.gate.weight" % l, "BF16", (experts, 64),
                  rand_bytes(rng, experts * 64 * 2)))
        for e in range(experts):
            for w, shp in (("w1", (96, 64)), ("w2", (64, 96)), ("w3", (96, 64))):
                t.append(("model.layers.%d.block_sparse_moe.experts.%d.%s.weight" % (l, e, w), "BF16", shp,
                          rand_bytes(rng, shp[0] * shp[1] * 2)))
    return st_bytes(t)


@pytest.fixture(scope="module")
def moe_images(tmp_path_factory):
    rng = np.random.default_rng(33)
    tmp = tmp_path_factory.mktemp("moe")
    mx, mx_data = mixtral(rng)
    stk, stk_data = st_bytes([
        ("model.layers.0.mlp.up_proj.weight", "F32", (4, 4), rand_bytes(rng, 64)),
        ("model.layers.1.mlp.experts.gate_up_proj", "F16", (8, 32, 16), rand_bytes(rng, 8 * 32 * 16 * 2)),
        ("model.layers.1.mlp.experts.down_proj", "F16", (8, 16, 16), rand_bytes(rng, 8 * 16 * 16 * 2)),
    ])
    gg, gg_data = gguf_bytes([
        ("blk.0.ffn_gate_inp.weight", "F32", (64, 4), rand_bytes(rng, 64 * 4 * 4)),
        ("blk.0.ffn_up_exps.weight", "Q8_0", (64, 32, 4), rand_bytes(rng, 64 * 32 * 4 // 32 * 34)),
        ("blk.0.ffn_down_exps.weight", "F16", (32, 64, 4), rand_bytes(rng, 32 * 64 * 4 * 2)),
    ])
    dense, _ = st_bytes([("model.layers.0.mlp.up_proj.weight", "F32", (4, 4), rand_bytes(rng, 64))])
    uri = make_image(tmp, {"/m/model.safetensors": mx, "/s/model.safetensors": stk, "/g/model.gguf": gg,
                           "/d/model.safetensors": dense})
    img = uri[len("emu:"):]
    subprocess.run([sys.executable, str(REPO / "bench" / "md_mkraid0.py"), img, "2", "64", str(tmp / "r")],
                   check=True, stdout=subprocess.DEVNULL)
    md = "md:emu:%s;emu:%s" % (tmp / "r0.img", tmp / "r1.img")
    # the file system in partition 2 of a GPT disk, at a start that is not
    # 4 KiB-aligned (file blocks are not LBAs there)
    (tmp / "gpt").mkdir()
    gpt, starts = gpt_disk(tmp / "gpt", img, [2], first=2051)
    assert starts[1] % 8 == 3
    yield {"uris": (uri, md, gpt), "mx": mx_data, "stk": stk_data, "gg": gg_data, "img": img, "tmp": tmp}


@pytest.fixture(scope="module")
def tcp_uri(moe_images):
    """the image behind the fake NVMe/TCP target on loopback"""
    ft_bin = BIN / "gpunvme-fake-target"
    if not ft_bin.exists():
        pytest.fail("%s is not built: make build" % ft_bin)
    ft = subprocess.Popen([str(ft_bin), "--image", moe_images["img"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    line = ft.stdout.readline().decode()  # "port N ..."
    if not line.split()[1:]:
        ft.kill()
        pytest.fail("the fake target did not start: %s %s" % (line, ft.stderr.read().decode()))
    yield "tcp://127.0.0.1:%s/%s" % (line.split()[1], NQN)
    ft.stdin.close()  # it runs until its stdin closes
    try:
        ft.wait(timeout=10)
    except subprocess.TimeoutExpired:
        ft.kill()
        ft.wait()


def bf16(b, shape):
    return np.frombuffer(b, dtype=np.uint16).reshape(shape)


@pytest.mark.parametrize("which", [0, 1, 2, 3], ids=["image", "md-raid0", "gpt-partition", "nvme-tcp"])
def test_mixtral_every_expert(moe_images, tcp_uri, which):
    uri = tcp_uri if which == 3 else moe_images["uris"][which]
    data = moe_images["mx"]
    with gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=3) as c:
        assert c.layout == "per-expert" and c.layers == [0, 1, 2] and c.n_experts == 4
        assert c.projections == ["w1.weight", "w2.weight", "w3.weight"]
        assert c.max_expert_bytes == 3 * 96 * 64 * 2
        rng = np.random.default_rng(4)
        asked = 0
        for _ in range(20):
            l = int(rng.integers(0, 3))
            ids = [int(x) for x in rng.choice(4, size=2, replace=False)]
            got = c.get(l, ids)
            asked += 2
            for e, d in zip(ids, got):
                for w in ("w1", "w2", "w3"):
                    name = "model.layers.%d.block_sparse_moe.experts.%d.%s.weight" % (l, e, w)
                    a = d[w + ".weight"]
                    assert a.dtype == np.uint16  # BF16: numpy has none, raw bits (as load_file)
                    assert a.shape == ((64, 96) if w == "w2" else (96, 64))
                    assert a.tobytes() == data[name], name
        st = c.stats()
        assert st["requests"] == asked and st["hits"] + st["misses"] == asked and st["slots"] == 3
        assert st["bytes_read"] == st["misses"] * c.max_expert_bytes
        # copies: a later get that evicts the expert does not change them
        first = c.get(0, [0])[0]["w1.weight"].copy()
        held = c.get(0, [0])[0]["w1.weight"]
        c.get(1, [1, 2, 3])
        assert np.array_equal(held, first)
        # an array of its own: writable, and writing it changes neither the
        # cache nor a later get of the same (resident) expert
        again = c.get(0, [0])[0]["w1.weight"]
        again[:] = 0
        assert c.get(0, [0])[0]["w1.weight"].tobytes() == data["model.layers.0.block_sparse_moe.experts.0.w1.weight"]


def test_stacked_and_gguf(moe_images):
    uri = moe_images["uris"][0]
    with gpunvme.ExpertCache(uri, "/s/model.safetensors", slots=2) as c:
        assert c.layout == "stacked" and c.layers == [1] and c.n_experts == 8
        assert c.projections == ["down_proj", "gate_up_proj"]
        for e in (0, 5, 7):
            d = c.get(1, [e])[0]
            gu = np.frombuffer(moe_images["stk"]["model.layers.1.mlp.experts.gate_up_proj"], np.float16)
            gu = gu.reshape(8, 32, 16)[e]
            assert d["gate_up_proj"].dtype == np.float16 and d["gate_up_proj"].shape == (32, 16)
            assert d["gate_up_proj"].tobytes() == gu.tobytes()  # random bits: NaNs compare unequal
            dn = np.frombuffer(moe_images["stk"]["model.layers.1.mlp.experts.down_proj"], np.float16)
            assert d["down_proj"].tobytes() == dn.reshape(8, 16, 16)[e].tobytes()
        assert c.pieces(1, 7)[1][0] == "model.layers.1.mlp.experts.gate_up_proj"
    with gpunvme.ExpertCache(uri, "/g/model.gguf", slots=2) as c:
        assert c.layout == "stacked" and c.layers == [0] and c.n_experts == 4
        assert c.projections == ["ffn_down_exps.weight", "ffn_up_exps.weight"]
        up = moe_images["gg"]["blk.0.ffn_up_exps.weight"]
        per = len(up) // 4
        for e in range(4):
            d = c.get(0, [e])[0]
            # quantized: raw blocks, rows of 64 Q8_0 elements (2 blocks of 34 bytes)
            q = d["ffn_up_exps.weight"]
            assert q.dtype == np.uint8 and q.shape == (32, 68)
            assert q.tobytes() == up[e * per:(e + 1) * per]
            dn = d["ffn_down_exps.weight"]
            assert dn.dtype == np.float16 and dn.shape == (64, 32)
            whole = np.frombuffer(moe_images["gg"]["blk.0.ffn_down_exps.weight"], np.float16).reshape(4, 64, 32)
            assert dn.tobytes() == whole[e].tobytes()


def test_refusals(moe_images):
    uri = moe_images["uris"][0]
    with pytest.raises(gpunvme.Error, match="not a mixture-of-experts model") as ei:
        gpunvme.ExpertCache(uri, "/d/model.safetensors", slots=2)
    assert ei.value.errno == 2
    with pytest.raises(gpunvme.Error, match="slots=0"):
        gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=0)
    with pytest.raises(gpunvme.Error):
        gpunvme.ExpertCache(uri, "/nope.safetensors", slots=2)
    with gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=2) as c:
        with pytest.raises(gpunvme.Error, match="layer 7 has no experts"):
            c.get(7, [0])
        with pytest.raises(gpunvme.Error, match="expected 0..3"):
            c.get(0, [4])
        with pytest.raises(gpunvme.Error, match="expected 0..3"):
            c.get(0, [-1])
        with pytest.raises(gpunvme.Error, match="at least 3 slots"):
            c.get(0, [0, 1, 2])
        assert c.get(0, []) == []
        assert len(c.get(0, [1, 1])) == 2  # the same expert twice: one slot
        # the GPU cache's calls on a CPU cache
        with pytest.raises(gpunvme.Error, match="GPU cache"):
            c.sync()
        with pytest.raises(gpunvme.Error, match="GPU cache"):
            c.weights(0)
    c.close()
    with pytest.raises(gpunvme.Error, match="closed"):
        c.get(0, [0])
    # device="cuda" hands out torch tensors; a tier needs a GPU device
    with pytest.raises(gpunvme.Error, match='framework="pt"'):
        gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=2, device="cuda")
    with pytest.raises(gpunvme.Error, match='needs device="cuda'):
        gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=2, tier=1)
    with pytest.raises(gpunvme.Error, match="tier=3: expected"):
        gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=2, device="cuda", tier=3)
    vol = gpunvme.Volume(uri)
    try:
        model = vol.open_model("/m/model.safetensors")
        with pytest.raises(gpunvme.Error, match="tier 3: expected 0"):
            gpunvme._gpunvme.Experts(model, 2, 3, 0)
        ex = gpunvme._gpunvme.Experts(model, 2)
        with pytest.raises(gpunvme.Error, match="CPU tier"):
            ex.fetch(0, 0, 1, 0, 0)
        with pytest.raises(gpunvme.Error, match="CPU tier"):
            ex.__dlpack_device__()
        pos = ex.place(2, 3)
        pcs = ex.pieces(2, 3)
        assert all(p % 4096 == off % 4096 for p, (_t, off, _n) in zip(pos, pcs))
    finally:
        vol.close()
