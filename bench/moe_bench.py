#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 33's benchmark: a mixture-of-experts model bigger than its GPU
memory budget, batch-1 greedy decoding, five ways in one run (GPU machine):

  a  ours: gpunvme.moe_decoder, experts read by GPU threads as the router picks them
  b  CPU-issued on demand: the router's ids copied to the host every layer, the chosen
     experts read by the CPU path (ExpertCache on the CPU tier) and copied to the GPU
  c  our whole-layer stream: every expert of every layer, each layer streamed
  d  accelerate disk offload of the experts (from_pretrained with a device_map putting each
     layer's experts on "disk"): reads the offload folder's files through the page cache,
     no modeled SSD
  e  the resident model (reference: transformers' eager experts)

The checkpoint: random bf16 weights from a config, saved by save_pretrained
(per-expert tensors), put in an ext4 image; read through the emulator with a
modeled 7 GB/s SSD ("ssd") or from RAM ("ram": the image read into memory).
Reported per row: time per token (median of the decode steps), bytes read per
token, cache hit rate, GPU memory (torch's peak + the cache's slots), logits
against (e) bitwise; the floor is the bytes of the experts missing from the
cache per token / the SSD's rate.

  python3 bench/moe_bench.py --kind mixtral --work /tmp/moe --out $OUT [--small] [--skew]
        [--rows e,a,b,c,d] [--media ssd,ram] [--tokens 16] [--trace]
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import transformers

import gpunvme
from gpunvme import _gpunvme
from gpunvme._parse import _wrap
from gpunvme._loading import _index
from gpunvme._transformers import _MOE_RENAMES, _rebuild_rotary

SSD = "latency_us=80&read_mbps=7000&iops=1000000"
SSD_BPS = 7.0e9

# (config class, fields, slots): the checkpoint >= 3x the GPU memory budget: torch's peak + the library's
# memory (the slots and the resident tensors, which torch's statistics do not see). Mixtral-shaped:
# 7.21 GB against 0.13 + 20 x 0.069 + 0.56 = 2.07 GB (3.5x; with 28 slots it was 2.74x). The skewed
# router's popular experts (k // 2 per layer: 12 of 20 slots, 48 of 120) fit the slots; the cache's
# rule (src/moe/policy.h) keeps them where an LRU would evict each just before its next use
SHAPES = {
    "mixtral": ("MixtralConfig", dict(hidden_size=2048, intermediate_size=5632, num_local_experts=8,
                                      num_experts_per_tok=2, num_hidden_layers=12, num_attention_heads=16,
                                      num_key_value_heads=8, vocab_size=32000), 20),
    "finegrained": ("Qwen3MoeConfig", dict(hidden_size=2048, moe_intermediate_size=768, intermediate_size=4096,
                                           num_experts=64, num_experts_per_tok=8, norm_topk_prob=True,
                                           decoder_sparse_step=1, num_hidden_layers=12,
                                           num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                           vocab_size=32000), 120),
}
SMALL = dict(hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=512)


def log(*a):
    print("[%s]" % time.strftime("%H:%M:%S"), *a, flush=True)


def config(kind, small):
    cls, fields, slots = SHAPES[kind]
    fields = dict(fields, max_position_embeddings=4096, tie_word_embeddings=False)
    if small:
        fields.update({k: v for k, v in SMALL.items() if k in fields or k == "head_dim" and kind != "mixtral"})
        slots = fields.get("num_experts_per_tok", 2) + 2
    cfg = getattr(transformers, cls)(**fields)
    cfg._attn_implementation = "eager"
    return cfg, slots


def n_experts(cfg):
    return getattr(cfg, "num_local_experts", None) or cfg.num_experts


SKEW_BIAS = 1.5


def skew_router(m, on):
    """--skew: experts 0..k/2-1 of every layer far more popular (so a token
    still picks others too). Every router's
    logits get SKEW_BIAS added for those experts, and its top-k is taken
    again from them as transformers 5's routers do (softmax in fp32, top-k,
    renormalised always (Mixtral) or with norm_topk_prob (Qwen), Qwen's
    weights cast to the logits' dtype). Applied to the loaded model of every
    row that runs with it (e, a, b: their routers are resident), so one
    checkpoint serves both runs and the rows stay comparable bit for bit.
    (Scaling router rows does not do it: a random row's logit is as often
    large negative as large positive.)"""
    if not on:
        return m
    k = m.config.num_experts_per_tok
    mixtral = m.config.model_type == "mixtral"
    norm = mixtral or getattr(m.config, "norm_topk_prob", False)

    def wrap(gate):
        orig = gate.forward

        def forward(hidden_states):
            logits = orig(hidden_states)[0]
            bias = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
            bias[:max(1, k // 2)] = SKEW_BIAS
            logits = logits + bias
            probs = torch.nn.functional.softmax(logits.float(), dim=-1)
            top, idx = torch.topk(probs, k, dim=-1)
            if norm:
                top = top / top.sum(dim=-1, keepdim=True)
            if not mixtral:
                top = top.to(logits.dtype)
            return logits, top, idx
        gate.forward = forward

    for name, mod in m.named_modules():
        if name.endswith("mlp.gate") and hasattr(mod, "weight") and mod.weight.dim() == 2:
            wrap(mod)
    return m


def checkpoint(kind, work, small):
    """the model directory and its ext4 image (made once, kept in work)"""
    name = "%s%s" % (kind, "-small" if small else "")
    d, img = os.path.join(work, name), os.path.join(work, name + ".img")
    cfg, slots = config(kind, small)
    if not os.path.exists(img):
        log("making", name)
        torch.manual_seed(11)
        with torch.device("cuda"):
            m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        m.save_pretrained(os.path.join(d, "m"), max_shard_size="2GB")
        del m
        torch.cuda.empty_cache()
        size = sum(os.path.getsize(os.path.join(d, "m", f)) for f in os.listdir(os.path.join(d, "m")))
        subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-d", d, img, "%dM" % (size * 11 // 10 // 2**20 + 64)],
                       check=True)
        subprocess.run(["cat", img], stdout=subprocess.DEVNULL, check=True)  # page cache warm
    return os.path.join(d, "m"), img, cfg, slots


def decode(model, ids, steps, trace=None, stats=None):
    """prefill ids, then `steps` greedy steps -> (logits per step as int16
    CPU tensors, seconds per decode step, the change of stats() over the
    decode steps: the prefill's reads are not a decode token's)"""
    out, times = [], []
    with torch.no_grad():
        r = model(ids, use_cache=True)
        out.append(r.logits[:, -1].view(torch.int16).cpu())
        pkv, nxt = r.past_key_values, r.logits[:, -1:].argmax(-1)
        s0 = stats() if stats else {}
        for s in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            if trace and s == steps // 2:
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                    r = model(nxt, past_key_values=pkv, use_cache=True)
                    torch.cuda.synchronize()
                prof.export_chrome_trace(trace)
            else:
                r = model(nxt, past_key_values=pkv, use_cache=True)
            nxt = r.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            out.append(r.logits[:, -1].view(torch.int16).cpu())
            pkv = r.past_key_values
        s1 = stats() if stats else {}
    return out, times, {k: s1[k] - s0.get(k, 0) for k in ("requests", "hits", "misses", "bytes_read", "stall_s")
                        if k in s1}


def meta_model(cfg):
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def row_hf(path, ids, steps, skew=False, **placement):
    """(e) resident (device_map="cuda") or (d) accelerate's offload: transformers' own loading"""
    m = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager",
                                                          **placement)
    m.set_experts_implementation("eager")
    skew_router(m, skew)
    m.eval()
    torch.cuda.reset_peak_memory_stats()
    logits, times, _ = decode(m, ids, steps)
    res = dict(peak_gpu=torch.cuda.max_memory_allocated())
    del m
    torch.cuda.empty_cache()
    return logits, times, res


def row_a(uri, cfg, ids, steps, slots, trace, skew=False):
    m = meta_model(cfg)
    cache = gpunvme.moe_decoder(m, uri, "/m", slots=slots, device="cuda")
    skew_router(m, skew)
    m.eval()
    slot_bytes, nslots = cache._x.layout()
    torch.cuda.reset_peak_memory_stats()
    logits, times, st = decode(m, ids, steps, trace, stats=cache.sync)
    res = dict(peak_gpu=torch.cuda.max_memory_allocated(), slots_bytes=slot_bytes * nslots,
               lib_bytes=slot_bytes * nslots + cache.resident_bytes, **st)
    del m
    cache.close()
    torch.cuda.empty_cache()
    return logits, times, res


class _CpuReader:
    """(b)'s reads: the experts a layer's router chose, issued by the CPU
    once their ids are on the host, through the library's CPU data path (one
    loader pass per shard for all the misses of a layer, full queue depth; a
    loader kept per shard, where load_pretrained would read the index and
    the headers again for every layer),
    then copied to the GPU; a cache of `slots` experts in GPU memory with
    (a)'s replacement rule (src/moe/policy.h: fewest requests, then least
    recently used, among the experts the request does not need; counts
    halved every 8 x keys requests), so both read the same misses"""

    AGE_PER_KEY = 8  # MOE_POLICY_AGE_PER_KEY

    def __init__(self, vol, local_dir, slots, keys):
        wm = os.path.join(local_dir, "model.safetensors.index.json")
        self.where = json.load(open(wm))["weight_map"] if os.path.exists(wm) else None
        self.vol, self.slots, self.keys, self.files = vol, slots, keys, {}
        self.res = {}     # (layer, e) -> {role: CUDA tensor}
        self.used = {}    # (layer, e) -> the clock of its last request
        self.freq = collections.Counter()
        self.clock = self.since_age = 0
        self.st = dict(requests=0, hits=0, misses=0, evictions=0, bytes_read=0)

    def _file(self, shard):
        if shard not in self.files:
            model = self.vol.open_model("/m/" + shard)
            self.files[shard] = (model, _index(model), _gpunvme.Loader(model, 0, 0))
        return self.files[shard]

    def _decide(self, layer, ids):
        """the C cache's order: count each request, then its victim"""
        self.clock += 1
        if self.since_age >= self.AGE_PER_KEY * self.keys:
            for k in self.freq:
                self.freq[k] >>= 1
            self.since_age = 0
        mine = {(layer, e) for e in ids}
        need = []
        for e in ids:
            key = (layer, e)
            self.st["requests"] += 1
            self.freq[key] += 1
            self.since_age += 1
            if key in self.res:
                self.st["hits"] += 1
            else:
                if len(self.res) >= self.slots:
                    victim = min((k for k in self.res if k not in mine),
                                 key=lambda k: (self.freq[k], self.used[k]))
                    del self.res[victim], self.used[victim]
                    self.st["evictions"] += 1
                self.res[key] = None  # filled below
                self.st["misses"] += 1
                need.append(e)
            self.used[key] = self.clock
        return need

    def get(self, layer, ids, names):
        """ids (host ints, distinct, at most slots) -> [{role: CUDA tensor}]; names(e) -> {role: tensor name}"""
        need = self._decide(layer, ids)
        per = {}
        for e in need:
            for role, name in names(e).items():
                per.setdefault(self.where[name] if self.where else "model.safetensors", []).append((e, role, name))
        for shard, items in per.items():
            _model, infos, ld = self._file(shard)
            bufs = ld.select([infos[n].index for _e, _r, n in items])
            bufs.load()
            for i, (e, role, n) in enumerate(items):
                t = _wrap(_gpunvme.Tensor(bufs, i), infos[n], "pt").to("cuda")
                if self.res[(layer, e)] is None:
                    self.res[(layer, e)] = {}
                self.res[(layer, e)][role] = t
                self.st["bytes_read"] += infos[n].nbytes
        return [self.res[(layer, e)] for e in ids]


class _CpuIssued:
    """(b): the router's ids to the host (the wait (a) does not have), the
    chosen experts read by the CPU path and copied (_CpuReader), then the
    same operations as (a) and the reference"""

    def __init__(self, reader, cache, layer, roles, act_fn, n_experts):
        self.r, self.layer, self.roles, self.act_fn, self.n = reader, layer, roles, act_fn, n_experts
        self.cache = cache

    def names(self, e):
        pieces = self.cache.pieces(self.layer, e)
        byp = dict(zip(self.cache.projections, pieces))
        return {role: byp[p][0] for role, p in self.roles.items()}

    def forward(self, hidden_states, top_k_index, top_k_weights):
        from torch.nn import functional as F
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.n).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0]
        ids = hit.tolist()  # the host wait
        for g0 in range(0, len(ids), self.r.slots):
            group = ids[g0:g0 + self.r.slots]
            for e, w in zip(group, self.r.get(self.layer, group, self.names)):
                gu = w["gate_up"] if "gate_up" in w else torch.cat([w["gate"], w["up"]], dim=0)
                top_k_pos, token_idx = torch.where(mask[e])
                current = hidden_states[token_idx]
                gate, up = F.linear(current, gu).chunk(2, dim=-1)
                h = F.linear(self.act_fn(gate) * up, w["down"])
                h = h * top_k_weights[token_idx, top_k_pos, None]
                final.index_add_(0, token_idx, h.to(final.dtype))
        return final


def row_b(uri, path, cfg, ids, steps, slots, skew=False):
    m = meta_model(cfg)
    vol = gpunvme.Volume(uri)
    # resident weights as (a) does; a GPU cache of the fewest slots, unused
    # but for its index (the experts' tensor names)
    gc = gpunvme.moe_decoder(m, vol, "/m", slots=cfg.num_experts_per_tok, device="cuda")
    reader = _CpuReader(vol, path, slots, len(gc._served) * gc.n_experts)
    for layer, served in gc._served.items():
        mod = m.get_submodule("model.layers.%d.mlp.experts" % layer)
        mod.forward = _CpuIssued(reader, gc, layer, served.roles, mod.act_fn, gc.n_experts).forward
    skew_router(m, skew)
    m.eval()
    torch.cuda.reset_peak_memory_stats()
    logits, times, st = decode(m, ids, steps, stats=lambda: dict(reader.st))
    # the library's memory: the resident tensors and the unused GPU cache's slots
    gslot_bytes, gslots = gc._x.layout()
    res = dict(peak_gpu=torch.cuda.max_memory_allocated(), lib_bytes=gc.resident_bytes + gslot_bytes * gslots, **st)
    del m, reader
    gc.close()
    vol.close()
    torch.cuda.empty_cache()
    return logits, times, res


def row_c(uri, cfg, ids, steps):
    """every tensor of a layer streamed (window 2), its experts fused into the
    module's stacked parameters as transformers' loading does"""
    m = meta_model(cfg)
    s = gpunvme.stream(uri, "/m", layers="model.layers.{i}.", window=2, device="cuda")
    dev = torch.device("cuda")
    res_sd = dict(s.resident)
    for old, new in _MOE_RENAMES:
        res_sd = {k.replace(old, new): v for k, v in res_sd.items()}
    m.load_state_dict(res_sd, strict=False, assign=True)
    for name, mod in list(m.named_modules()):
        if type(mod).__name__.endswith("RotaryEmbedding"):
            _rebuild_rotary(m, name, mod, dev)
    E = n_experts(cfg)
    layers = m.get_submodule("model.layers")

    def pre(i):
        def hook(mod, args, kwargs=None):
            t = s.acquire(i)
            pre_ = "model.layers.%d." % i
            ex = {}
            for name, v in t.items():
                rel = name[len(pre_):]
                for old, new in _MOE_RENAMES:
                    rel = ("." + rel).replace(old, new)[1:]
                if ".experts." in rel:
                    ex[rel.split(".experts.", 1)[1]] = v
                    continue
                path, _, leaf = rel.rpartition(".")
                sub = mod.get_submodule(path) if path else mod
                sub._parameters[leaf] = torch.nn.Parameter(v, requires_grad=False)
            experts = mod.get_submodule("mlp.experts")
            if "gate_up_proj" in ex:
                gu, down = ex["gate_up_proj"], ex["down_proj"]
            else:
                names = ("w1.weight", "w3.weight", "w2.weight") if "0.w1.weight" in ex else \
                        ("gate_proj.weight", "up_proj.weight", "down_proj.weight")
                gu = torch.stack([torch.cat([ex["%d.%s" % (e, names[0])], ex["%d.%s" % (e, names[1])]], 0)
                                  for e in range(E)])
                down = torch.stack([ex["%d.%s" % (e, names[2])] for e in range(E)])
            experts._parameters["gate_up_proj"] = torch.nn.Parameter(gu, requires_grad=False)
            experts._parameters["down_proj"] = torch.nn.Parameter(down, requires_grad=False)
        return hook

    def post(i):
        def hook(mod, args, out):
            # the layer's fused experts go with its slot: GPU memory holds
            # the window's layers, not every layer run so far
            experts = mod.get_submodule("mlp.experts")
            for p in ("gate_up_proj", "down_proj"):
                experts._parameters[p] = torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16, device="cuda"),
                                                            requires_grad=False)
            s.release(i)
            if i == len(layers) - 1:
                s.check(i)
        return hook

    for i, mod in enumerate(layers):
        mod.register_forward_pre_hook(pre(i))
        mod.register_forward_hook(post(i))
    m.set_experts_implementation("eager")
    m.eval()
    torch.cuda.reset_peak_memory_stats()
    logits, times, st = decode(m, ids, steps, stats=s.stats)
    # the stream's slots and resident tensors are the library's memory
    res = dict(peak_gpu=torch.cuda.max_memory_allocated(), lib_bytes=s.stats()["memory_bytes"], **st)
    s.close()
    del m
    torch.cuda.empty_cache()
    return logits, times, res


def row_d(path, cfg, ids, steps, work):
    """accelerate's disk offload of the experts only (every other module on
    the GPU): an explicit device_map, as bench/stream_llm.py's accelerate row
    (which ran on transformers 5.17), with each layer's experts on "disk" """
    import accelerate  # noqa: F401  (device_map needs it)
    m = meta_model(cfg)
    dm = {"lm_head": 0}
    for name, _ in m.model.named_children():
        if name != "layers":
            dm["model." + name] = 0
    for i, layer in enumerate(m.model.layers):
        for name, child in layer.named_children():
            if name == "mlp":
                for c, _ in child.named_children():
                    dm["model.layers.%d.mlp.%s" % (i, c)] = "disk" if c == "experts" else 0
            else:
                dm["model.layers.%d.%s" % (i, name)] = 0
    return row_hf(path, ids, steps, device_map=dm, offload_folder=os.path.join(work, "offload"))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=sorted(SHAPES), required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true", help="a tiny model: a smoke run of every row")
    ap.add_argument("--skew", action="store_true", help="a skewed router (experts 0..k-1 popular)")
    ap.add_argument("--rows", default="e,a,b,c,d")
    ap.add_argument("--media", default="ssd,ram")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--trace", action="store_true", help="a profiler trace of one decode step of (a)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    path, img, cfg, slots = checkpoint(a.kind, a.work, a.small)
    if a.skew and set(a.rows.split(",")) - {"e", "a", "b"}:
        sys.exit("--skew: rows e, a and b only (the router must be resident to be skewed)")
    total = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors"))
    ids = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(5)).cuda()
    rows = a.rows.split(",")
    results, ref = [], None
    for row in rows:
        for media in (a.media.split(",") if row in ("a", "b", "c") else ["-"]):
            uri = "emu:%s?%s" % (img, SSD if media == "ssd" else "snapshot=1")
            log("row", row, media)
            t0 = time.perf_counter()
            try:
                if row == "e":
                    logits, times, res = row_hf(path, ids, a.tokens, a.skew, device_map="cuda")
                elif row == "a":
                    tr = os.path.join(a.out, "trace-%s-%s.json" % (a.kind, media)) if a.trace else None
                    logits, times, res = row_a(uri, cfg, ids, a.tokens, slots, tr, a.skew)
                elif row == "b":
                    logits, times, res = row_b(uri, path, cfg, ids, a.tokens, slots, a.skew)
                elif row == "c":
                    logits, times, res = row_c(uri, cfg, ids, a.tokens)
                else:
                    logits, times, res = row_d(path, cfg, ids, a.tokens, a.work)
            except Exception as x:  # a row that fails is reported, the others still run
                log("row", row, media, "FAILED:", repr(x))
                results.append(dict(row=row, media=media, error=repr(x)))
                continue
            r = dict(row=row, media=media, kind=a.kind, skew=a.skew, tokens=a.tokens,
                     s_per_token=statistics.median(times), wall_s=time.perf_counter() - t0, **res)
            if row == "e":
                ref = logits
            elif ref is not None:
                r["bitwise_equal_steps"] = sum(torch.equal(x, y) for x, y in zip(logits, ref))
                r["steps"] = len(ref)
            if "bytes_read" in r:
                # the decode steps' reads (decode() leaves the prefill's out)
                r["bytes_per_token"] = r["bytes_read"] / a.tokens
            if "stall_s" in r:
                # (a): the time per token the stream waited for expert reads
                r["stall_s_per_token"] = r["stall_s"] / a.tokens
            if "misses" in r and r.get("requests"):
                r["hit_rate"] = r["hits"] / max(1, r["hits"] + r["misses"])
                r["floor_s"] = r["bytes_per_token"] / SSD_BPS if media == "ssd" else None
            # GPU memory: torch's peak plus the library's (slots, resident
            # tensors, stream slots), which torch's statistics do not count
            r["gpu_bytes"] = r["peak_gpu"] + r.get("lib_bytes", 0)
            if row == "a":
                r["budget"] = r["gpu_bytes"]
                r["checkpoint_over_budget"] = total / r["budget"]
            results.append(r)
            log(json.dumps(r))
    out = dict(kind=a.kind, small=a.small, skew=a.skew, checkpoint_bytes=total, slots=slots,
               gpu=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d %H:%M"),
               command=" ".join(sys.argv), rows=results)
    with open(os.path.join(a.out, "moe-%s%s%s.json" % (a.kind, "-small" if a.small else "", "-skew" if a.skew else "")),
              "w") as f:
        json.dump(out, f, indent=1)
    print("| row | media | s/token | bytes/token | hit rate | floor s | GPU bytes | bitwise |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print("| %s | %s | FAILED: %s |" % (r["row"], r["media"], r["error"][:80]))
            continue
        print("| %s | %s | %.4f | %s | %s | %s | %s | %s |" % (
            r["row"], r["media"], r["s_per_token"], "%.3g" % r["bytes_per_token"] if "bytes_per_token" in r else "-",
            "%.2f" % r["hit_rate"] if "hit_rate" in r else "-", "%.4f" % r["floor_s"] if r.get("floor_s") else "-",
            r["gpu_bytes"],
            "%d/%d" % (r["bitwise_equal_steps"], r["steps"]) if "steps" in r else "ref"))


if __name__ == "__main__":
    main()
