# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme.moe_decoder: a transformers MoE model (Mixtral-shaped and a
fine-grained Qwen3-MoE) with its experts read on demand by GPU threads,
against the same checkpoint resident on the GPU with transformers' eager
experts: the logits of a prefill and of every greedy decode step bitwise
equal. Random weights, saved by save_pretrained (per-expert tensors, as
transformers 5 writes them), in an ext4 image behind the emulator. Qwen2-MoE (a shared expert beside the
routed ones) was added after the session's GPU runs. Skipped
without the CUDA backend, torch with a GPU, or transformers 5."""
import os

import pytest

import gpunvme

from conftest import make_image

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not gpunvme.cuda_available() or not torch.cuda.is_available():
    pytest.skip("needs the extension built with CUDA, torch with CUDA and a GPU", allow_module_level=True)


def _config(kind, layers=3):
    # the layer count goes in at construction: configs such as Qwen2-MoE's size
    # their per-layer lists (layer_types) from it there
    common = dict(hidden_size=256, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=512, max_position_embeddings=128, tie_word_embeddings=False)
    if kind == "mixtral":
        # 8 experts, top-2; an expert's w1/w3 [128, 256] bf16: 64 KiB each
        return transformers.MixtralConfig(intermediate_size=128, num_local_experts=8, num_experts_per_tok=2,
                                          **common)
    if kind == "qwen2_moe":
        # 60 experts, top-4, not renormalised (the config's default), and a
        # shared expert with its sigmoid gate: resident, as every dense tensor
        return transformers.Qwen2MoeConfig(moe_intermediate_size=128, intermediate_size=256,
                                           shared_expert_intermediate_size=256, num_experts=60,
                                           num_experts_per_tok=4, decoder_sparse_step=1, **common)
    # fine-grained: 64 experts, top-8, renormalised as Qwen3 checkpoints set it
    return transformers.Qwen3MoeConfig(moe_intermediate_size=128, intermediate_size=256, num_experts=64,
                                       num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1,
                                       head_dim=64, **common)


@pytest.fixture(scope="module", params=["mixtral", "qwen3_moe", "qwen2_moe"])
def checkpoint(request, tmp_path_factory):
    kind = request.param
    cfg = _config(kind)
    cfg._attn_implementation = "eager"
    torch.manual_seed(7)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    d = tmp_path_factory.mktemp(kind)
    model.save_pretrained(d / "m")
    files = {"/m/" + f: (d / "m" / f).read_bytes() for f in os.listdir(d / "m")}
    uri = make_image(d, files)
    return kind, d / "m", uri, cfg


def _reference(path):
    # device_map="cuda": loaded straight to the GPU, as a user would (the
    # rotary embedding's inverse frequencies are computed on the CPU either
    # way, and moe_decoder must do the same: computed on the GPU some differ
    # in the last bit, and so do the logits a few positions in)
    m = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager",
                                                          device_map="cuda")
    m.set_experts_implementation("eager")
    return m.eval()


def _ours(cfg, uri, slots, tier=None):
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    cache = gpunvme.moe_decoder(m, uri, "/m", slots=slots, device="cuda", tier=tier)
    return m.eval(), cache


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("tier", [1, 2])
def test_logits_bitwise_equal(checkpoint, tier):
    kind, path, uri, cfg = checkpoint
    k = cfg.num_experts_per_tok
    n_experts = cfg.num_local_experts if kind == "mixtral" else cfg.num_experts
    layers = cfg.num_hidden_layers
    ref = _reference(path)
    # room for one token's experts in every layer and two more, far from
    # all of them: a token finds some of the last token's experts (hits),
    # and the rest evict
    slots = layers * k + 2
    ours, cache = _ours(cfg, uri, slots, tier)
    assert cache.tier == tier
    assert slots < layers * n_experts
    for name in ("model.rotary_emb",):
        assert torch.equal(ref.get_submodule(name).inv_freq, ours.get_submodule(name).inv_freq), \
            "%s: inverse frequencies differ from transformers' own" % name
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, cfg.vocab_size, (1, 12), generator=g).cuda()
    with torch.no_grad():
        r = ref(ids, use_cache=True)
        o = ours(ids, use_cache=True)
        assert _same(r.logits, o.logits), "prefill logits differ"
        rp, op = r.past_key_values, o.past_key_values
        nxt = r.logits[:, -1:].argmax(-1)
        for step in range(16):
            r = ref(nxt, past_key_values=rp, use_cache=True)
            o = ours(nxt, past_key_values=op, use_cache=True)
            assert _same(r.logits, o.logits), "decode step %d: logits differ" % step
            rp, op = r.past_key_values, o.past_key_values
            nxt = r.logits[:, -1:].argmax(-1)
    st = cache.sync()
    assert st["misses"] > 0 and st["hits"] > 0 and st["evictions"] > 0, st
    assert st["stalled"] > 0 and st["stall_s"] > 0, st
    # the resident tensors (the library's memory): some, and fewer than the checkpoint's
    total = sum(os.path.getsize(path / f) for f in os.listdir(path) if f.endswith(".safetensors"))
    assert 0 < cache.resident_bytes < total
    assert st["bytes_read"] > 0, st
    cache.close()


def test_refusals(checkpoint):
    kind, path, uri, cfg = checkpoint
    # a model whose layers do not match the checkpoint's
    other = _config(kind, layers=cfg.num_hidden_layers + 1)
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(other, dtype=torch.bfloat16)
    with pytest.raises(gpunvme.Error, match="experts in layers"):
        gpunvme.moe_decoder(m, uri, "/m", slots=cfg.num_experts_per_tok + 2)


def test_too_few_slots(checkpoint):
    kind, path, uri, cfg = checkpoint
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with pytest.raises(gpunvme.Error, match="fewer than the router's top-k"):
        gpunvme.moe_decoder(m, uri, "/m", slots=cfg.num_experts_per_tok - 1)
