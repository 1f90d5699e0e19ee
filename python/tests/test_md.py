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
from conftest import make_image, rand_bytes, st_bytes, tiny_llama_cfg

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


def test_md_several_devices(array):
    """an md array onto several devices (CPU-tier loaders standing in for
    GPUs, as in test_multi.py): every placement's selections loaded together
    (load_many) through every member controller, every byte compared; the
    split's rows of "w" (1.5 MiB, 64 KiB chunks) are each device's alone"""
    members, data = array
    devs = [(0, 0, "cpu%d" % k) for k in range(3)]
    with gpunvme.Volume("md:" + ";".join(members)) as v:
        m = v.open_model("/m/model.safetensors")
        sel = list(gpunvme._index(m).values())
        for placement in ("layers", "size"):
            sd = gpunvme._load_multi(m, sel, devs, placement, 0, "np", False, "m", None, None)
            for name, want in data.items():
                assert raw(sd[name]) == want, (placement, name)
        shards = gpunvme._load_multi(m, sel, devs, "split", 0, "np", False, "m", None, None)
        assert b"".join(raw(s["w"]) for s in shards) == data["w"]
        assert [s["w"].shape for s in shards] == [(128, 1024)] * 3
        assert b"".join(raw(s["b"]) for s in shards) == data["b"]
        assert [s["e"].shape for s in shards] == [(0, 3)] * 3


def test_md_refusals(array):
    members, _ = array
    with pytest.raises(gpunvme.Error, match="slot 3 missing"):
        gpunvme.Volume("md:" + ";".join(members[:3]))
    with pytest.raises(gpunvme.Error, match="empty member"):
        gpunvme.Volume("md:%s;;%s" % (members[0], members[1]))
    with pytest.raises(gpunvme.Error, match="same namespace"):
        gpunvme.Volume("md:%s;%s;%s;%s" % (members[0], members[0], members[1], members[2]))


# ---- the layer stream on the committed mdadm fixtures (tests/md/fixtures) ----

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "md" / "fixtures"
MODEL = "/models/model.safetensors"


def _fixture_names():
    return sorted(p.name[:-len(".manifest")] for p in FIXTURES.glob("*.manifest")
                  if MODEL in p.read_text())


@pytest.fixture(scope="module", params=_fixture_names())
def md_fixture(request, tmp_path_factory):
    """(md: URI with the members reversed, the model file's bytes checked
    against the guest's sha256 manifest) for one mdadm array"""
    import hashlib
    import shutil
    if not shutil.which("zstd"):
        pytest.fail("zstd is not installed (apt-get install zstd): the md fixtures are compressed")
    name = request.param
    w = tmp_path_factory.mktemp(name)
    members = []
    k = 0
    while (FIXTURES / ("%s.m%d.img.zst" % (name, k))).exists():
        out = w / ("m%d.img" % k)
        subprocess.run(["zstd", "-dqf", str(FIXTURES / ("%s.m%d.img.zst" % (name, k))), "-o", str(out)], check=True)
        members.append("emu:%s" % out)
        k += 1
    uri = "md:" + ";".join(reversed(members))
    want = next(line.split()[0] for line in (FIXTURES / (name + ".manifest")).read_text().splitlines()
                if line.endswith(" " + MODEL))
    with gpunvme.Volume(uri) as v:
        blob = v.read(MODEL)
    assert hashlib.sha256(blob).hexdigest() == want, "the array's model file differs from the manifest"
    return uri, blob


def _st_ranges(blob):
    """safetensors header -> {name: file bytes of the tensor}"""
    import json
    import struct
    n = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + n])
    base = 8 + n
    return {k: blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]]
            for k, v in hdr.items() if k != "__metadata__"}


@pytest.mark.parametrize("window", [1, 2, 3])
def test_md_stream_fixture(md_fixture, window):
    """every layer and resident tensor streamed from the array, two passes,
    every byte equal to the file's (before the fix: 0 of 17 right, no error)"""
    uri, blob = md_fixture
    data = _st_ranges(blob)
    s = gpunvme.stream(uri, MODEL, layers="model.layers.{i}.", window=window, device="cpu", framework="numpy")
    seen = dict.fromkeys(data, 0)
    for n, t in s.resident.items():
        assert raw(t) == data[n], n
        seen[n] += 2
    for _ in range(2):
        for i, layer in s:
            for n, t in layer.items():
                assert raw(t) == data[n], "layer %d: %s" % (i, n)
                seen[n] += 1
    s.close()
    assert all(c == 2 for c in seen.values()), [n for n, c in seen.items() if c != 2][:5]


@pytest.mark.parametrize("tier", [1, 2])
def test_md_stream_fixture_cuda(md_fixture, tier):
    """the same on the GPU tiers (GPU machine)"""
    torch = pytest.importorskip("torch")
    if not gpunvme.cuda_available() or not torch.cuda.is_available():
        pytest.skip("no CUDA backend or no GPU")
    uri, blob = md_fixture
    data = _st_ranges(blob)
    s = gpunvme.stream(uri, MODEL, layers="model.layers.{i}.", window=2, device="cuda", tier=tier,
                       no_fallback=True)
    assert s.tier == tier
    for _ in range(2):
        for i, layer in s:
            torch.cuda.current_stream().synchronize()
            for n, t in layer.items():
                b = t.contiguous().view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b""
                assert b == data[n], "layer %d: %s" % (i, n)
    s.close()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_md_stream_decoder(tmp_path, device):
    """a tiny Llama on a RAID0 array of 3 emulated controllers: logits with
    streamed layers == the resident model's, bitwise"""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if device == "cuda" and (not gpunvme.cuda_available() or not torch.cuda.is_available()):
        pytest.skip("no CUDA backend or no GPU")
    torch.manual_seed(0)
    cfg = tiny_llama_cfg(transformers)
    d = tmp_path / "tiny"
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(str(d), max_shard_size="40KB", safe_serialization=True)
    uri = make_image(tmp_path, {"/tiny/" + p.name: p.read_bytes() for p in d.iterdir()})
    # the reference: the whole model loaded from the plain image (the same
    # kernels run on the same bytes: logits equal bit for bit)
    with torch.device("meta"):
        ref = transformers.LlamaForCausalLM(cfg).eval()
    ref.load_state_dict(gpunvme.load_pretrained(uri, "/tiny", device=device), assign=True, strict=True)
    gpunvme._rebuild_rotary(ref, "model.rotary_emb", ref.model.rotary_emb, torch.device(device))
    subprocess.run([sys.executable, str(MKRAID0), uri[len("emu:"):], "3", "16", str(tmp_path / "m")], check=True,
                   stdout=subprocess.DEVNULL)
    md = "md:" + ";".join("emu:%s" % (tmp_path / ("m%d.img" % k)) for k in (2, 0, 1))
    with torch.device("meta"):
        m = transformers.LlamaForCausalLM(cfg).eval()
    s = gpunvme.stream_decoder(m, md, "/tiny", window=2, device=device)
    ids = torch.randint(0, 300, (1, 12)).to(device)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(ref(ids).logits, m(ids).logits)
    assert s.stats()["acquires"] == 8
