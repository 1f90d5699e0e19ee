# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme.stream on the CPU tier: a decoder saved as Hugging Face shards
(layers split across shards) streamed layer by layer, every tensor of every
layer compared with the bytes written; bad inputs; with torch and
transformers, a tiny Llama run through stream_decoder on the CPU gives the
logits of the fully loaded model, bit for bit."""
import errno
import json

import numpy as np
import pytest

import gpunvme
from conftest import make_image, rand_bytes, st_bytes, tiny_llama_cfg


def raw(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def decoder_files(rng, n_layers=5, n_shards=3):
    ts = [("model.embed_tokens.weight", "BF16", (50, 16), rand_bytes(rng, 50 * 16 * 2))]
    for i in range(n_layers):
        for part, shape in (("self_attn.q_proj.weight", (16, 16 + i)), ("mlp.up_proj.weight", (40, 16)),
                            ("input_layernorm.weight", (16,))):
            n = int(np.prod(shape))
            ts.append(("model.layers.%d.%s" % (i, part), "F32", shape, rand_bytes(rng, n * 4)))
    ts.append(("model.norm.weight", "F32", (16,), rand_bytes(rng, 64)))
    per = (len(ts) + n_shards - 1) // n_shards
    files, wm, data = {}, {}, {}
    for k in range(n_shards):
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, n_shards)
        blob, d = st_bytes(ts[k * per:(k + 1) * per], {"format": "pt"})
        files["/llm/" + fn] = blob
        data.update(d)
        for name in d:
            wm[name] = fn
    files["/llm/model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": wm}).encode()
    return files, data


@pytest.fixture(scope="module")
def dec(tmp_path_factory):
    rng = np.random.default_rng(16)
    files, data = decoder_files(rng)
    uri = make_image(tmp_path_factory.mktemp("stream"), files)
    return uri, data


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8])
def test_stream_every_layer(dec, window):
    uri, data = dec
    s = gpunvme.stream(uri, "/llm", layers="model.layers.{i}.", window=window, device="cpu", framework="numpy")
    assert s.n_layers == 5 and len(s) == 5 and s.tier == 0
    assert set(s.resident) == {"model.embed_tokens.weight", "model.norm.weight"}
    for n, t in s.resident.items():
        assert raw(t) == data[n]
    seen = {}
    for p in range(2):
        for i, layer in s:
            assert sorted(layer) == sorted(n for n in data if n.startswith("model.layers.%d." % i))
            for n, t in layer.items():
                assert raw(t) == data[n], n
                seen[n] = seen.get(n, 0) + 1
    assert all(seen[n] == 2 for n in data if ".layers." in n)
    st = s.stats()
    assert st["layers"] == 5 and st["window"] == min(window, 5) and st["acquires"] == 10
    assert st["layer_loads"] == (5 if window >= 5 else 10) and st["restarts"] == 0
    assert st["bytes_read"] > 0 and st["memory_bytes"] >= st["window"] * st["slot_bytes"]
    assert 0.0 <= st["overlap"] <= 1.0
    s.close()


def test_stream_by_hand_and_out_of_order(dec):
    uri, data = dec
    with gpunvme.LayerStream(uri, "/llm", window=2, device="cpu", framework="np", resident="model.norm.*") as s:
        assert set(s.resident) == {"model.norm.weight"}
        for i in (3, 0, 4, 4, 1):
            layer = s.acquire(i)
            for n, t in layer.items():
                assert raw(t) == data[n]
            s.release(i)
        # window {0,1} -> 3: restart {3,4}; 0, 4 come in order; 4 again: restart
        assert s.stats()["restarts"] == 2
        s.acquire(2)
        with pytest.raises(gpunvme.Error) as e:
            s.acquire(2)
        assert e.value.errno == errno.EBUSY and "already held" in str(e.value)
        with pytest.raises(gpunvme.Error) as e:
            s.release(3)
        assert e.value.errno == errno.EINVAL and "not held" in str(e.value)
        with pytest.raises(gpunvme.Error) as e:
            s.acquire(5)
        assert e.value.errno == errno.ERANGE
        s.check()  # the CPU tier reports in acquire: nothing pending
        s.check(0)
        with pytest.raises(gpunvme.Error) as e:
            s.check(5)
        assert e.value.errno == errno.ERANGE and "layers 0..4" in str(e.value)
        with pytest.raises(TypeError):
            s.check("1")


@pytest.mark.parametrize("kw,code,msg", [
    (dict(layers="model.layers."), errno.EINVAL, "has no {i}"),
    (dict(layers="a.{i}.{i}"), errno.EINVAL, "{i} twice"),
    (dict(layers="blk.{i}."), errno.ENOENT, "no tensor matches"),
    (dict(window=0), errno.EINVAL, "at least 1 slot"),
    (dict(resident="model.layers.1.*"), errno.EINVAL, "either streamed or resident"),
    (dict(device="cuda:x"), errno.EINVAL, "cuda:N"),
])
def test_stream_bad_inputs(dec, kw, code, msg):
    uri, _ = dec
    args = dict(layers="model.layers.{i}.", window=2, device="cpu", framework="np")
    args.update(kw)
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.stream(uri, "/llm", **args)
    assert e.value.errno == code and msg in str(e.value), str(e.value)


def test_stream_bad_types(dec):
    uri, _ = dec
    for kw in (dict(window="2"), dict(window=True), dict(layers=3), dict(resident=1)):
        with pytest.raises(TypeError):
            gpunvme.stream(uri, "/llm", device="cpu", framework="np", **kw)
    with pytest.raises(gpunvme.Error) as e:
        gpunvme.stream(uri, "/nope", device="cpu", framework="np")
    assert e.value.errno == errno.ENOENT


# Tier 2 without sync_reads: the consumer blocks in CUDA (.cpu() here: a
# pageable copy) while the stream's reads are in flight. The emulator's
# copies run in a process of their own (src/emu_cuda/dma_proto.h), so they
# are not held up; before that they stalled until the read kernel timed
# out. Also with sync_reads, and on Tier 1.
@pytest.mark.parametrize("tier,sync_reads", [(2, False), (2, True), (1, False)])
def test_stream_cuda_every_layer(dec, tier, sync_reads):
    """the bytes of every layer on the GPU, in stream order"""
    torch = pytest.importorskip("torch")
    if not gpunvme.cuda_available() or not torch.cuda.is_available():
        pytest.skip("no CUDA backend or no GPU")
    uri, data = dec
    s = gpunvme.stream(uri, "/llm", window=2, device="cuda", tier=tier, no_fallback=True, sync_reads=sync_reads)
    assert s.tier == tier
    for p in range(3):
        for i, layer in s:
            if tier == 1:  # host memory: the CPU reads it once the stream's wait for the reads is over
                torch.cuda.current_stream().synchronize()
            for n, t in layer.items():
                b = t.contiguous().view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b""
                assert b == data[n], n
    st = s.stats()
    # the GPU tiers read ahead: the window's 2 layers at open, one per release
    assert st["acquires"] == 15 and st["layer_loads"] == 2 + 15 and 0.0 <= st["overlap"] <= 1.0


def test_stream_decoder_default_window():
    """stream_decoder keeps 4 slots by default, the plain stream 2: a decode
    loop's step boundary (the host waits for the token, then sets up the next
    step) needs reads queued 3 layers ahead (docs/python.md)"""
    import inspect
    assert inspect.signature(gpunvme.stream_decoder).parameters["window"].default == 4
    assert inspect.signature(gpunvme.stream).parameters["window"].default == 2
    assert inspect.signature(gpunvme.LayerStream).parameters["window"].default == 2


@pytest.mark.parametrize("device,tier,window", [("cpu", None, 2), ("cpu", None, None), ("cuda", None, 2),
                                               ("cuda", None, None), ("cuda", 1, 2)])
def test_stream_decoder_llama(tmp_path, device, tier, window):
    """a tiny Llama: logits with streamed layers == fully loaded, bitwise;
    on Tier 1 (pinned slots, each layer copied to the GPU) no layer's GPU
    copy outlives its forward; window None: the default (4 slots, as many
    as the model's layers: each read once)"""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if device == "cuda" and (not gpunvme.cuda_available() or not torch.cuda.is_available()):
        pytest.skip("no CUDA backend or no GPU")
    from safetensors.torch import save_file  # noqa: F401 (save_pretrained needs it)
    torch.manual_seed(0)
    cfg = tiny_llama_cfg(transformers)
    ref = transformers.LlamaForCausalLM(cfg).eval()
    root = tmp_path / "root"
    ref.save_pretrained(str(root / "tiny"), max_shard_size="40KB", safe_serialization=True)
    files = {"/tiny/" + p.name: p.read_bytes() for p in (root / "tiny").iterdir()}
    uri = make_image(tmp_path, files)
    with torch.device("meta"):
        full = transformers.LlamaForCausalLM(cfg).eval()
    full.load_state_dict(gpunvme.load_pretrained(uri, "/tiny", device=device), assign=True, strict=True)
    gpunvme._rebuild_rotary(full, "model.rotary_emb", full.model.rotary_emb, torch.device(device))
    if tier == 1:  # Tier 1's layers are torch allocations: the reference's too (the same kernels)
        for p in full.parameters():
            p.data = p.data.clone()
    with torch.device("meta"):
        m = transformers.LlamaForCausalLM(cfg).eval()
    kw = {} if window is None else {"window": window}
    s = gpunvme.stream_decoder(m, uri, "/tiny", device=device, tier=tier, no_fallback=tier is not None, **kw)
    assert tier is None or s.tier == tier
    ids = torch.randint(0, 300, (1, 12)).to(device)
    with torch.no_grad():
        for _ in range(2):
            a = full(ids).logits
            b = m(ids).logits
            assert torch.equal(a, b)
            if tier == 1:
                held = [n for n, p in m.model.layers.named_parameters()]
                assert held == [], held[:3]
    st = s.stats()
    assert st["acquires"] == 8 and st["layers"] == 4 and st["window"] == (window or 4)
    assert st["layer_loads"] == (4 if st["window"] >= 4 else 8 + (0 if device == "cpu" else st["window"]))
