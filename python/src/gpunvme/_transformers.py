# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: the transformers integration: a decoder whose layers are streamed."""
from ._gpunvme import Error
from ._stream import LayerStream


def _rebuild_rotary(model, module_name, module, dev):
    """A rotary embedding's inv_freq is a non-persistent buffer (not in the
    checkpoint): built again from the model's config, on the CPU and then
    moved, as transformers' own loading computes it (its _init_weights with
    no device): computed on the GPU, some inverse frequencies differ in the
    last bit, and the logits with them a few positions in."""
    parent = model.get_submodule(module_name.rsplit(".", 1)[0]) if "." in module_name else model
    leaf = module_name.rsplit(".", 1)[-1]
    import torch
    with torch.device("cpu"):
        rebuilt = type(module)(config=model.config)
    setattr(parent, leaf, rebuilt.to(dev))


def _load_resident(model, sd, model_dir):
    """the checkpoint's tensors outside what is streamed or read on demand,
    into the model (assign: no copy); one the model lacks is refused"""
    _missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    if unexpected:
        raise Error(22, "%s: tensors the model does not have: %s" % (model_dir, ", ".join(sorted(unexpected)[:5])))
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
        model.tie_weights()


def stream_decoder(model, uri, model_dir, layers="model.layers.{i}.", window=4, device="cuda", **kw):
    """Run a Hugging Face decoder (Llama architecture and alike) with its
    decoder layers streamed: every tensor outside the layers is loaded once
    into the model (load_state_dict(assign=True)); each decoder layer gets
    its weights from the stream in a forward pre-hook and gives its slot
    back in a forward hook (stream-ordered: no host wait). Build the model
    on the meta device (`with torch.device("meta"): Model(config)`) so that
    no memory is spent on the layers; rotary embeddings are rebuilt on the
    device. A failed read raises gpunvme.Error from the forward, at its last
    layer at the latest (before the output is returned). Returns the
    LayerStream (stats(), close()); the model keeps it as
    model._gpunvme_stream.

    window=4 by default (gpunvme.stream's is 2): a decoding step begins
    only once the host has the last step's token, and the host's work before
    it releases layer 0 (sampling, the step's set-up, layer 0's own host
    work, most of it in its attention call: likely a cuDNN plan for each
    new key/value length) took 38-91 ms on an H200
    (bench/results/emu-2026-11-29-s22). The reads can run only window - 1
    layers ahead of it; at two slots they stood idle 6-43 ms a step behind a
    modeled 7 GB/s SSD with 120 MB layers. Pass window=2 where memory is
    tighter than time."""
    import torch
    s = LayerStream(uri, model_dir, layers=layers, window=window, device=device, **kw)
    dev = torch.device(s.device)
    # Tier 1 (the policy's choice where the volume cannot DMA into GPU memory) gives CPU
    # tensors in pinned memory: copied on the current stream, in order
    copy = s.tier == 1
    prefix = layers.split("{i}")[0]
    container = model.get_submodule(prefix.rstrip("."))
    if len(container) != s.n_layers:
        raise Error(22, "%s: the model has %d decoder layers under %r, the checkpoint %d"
                    % (model_dir, len(container), prefix.rstrip("."), s.n_layers))
    _load_resident(model, {k: (v.to(dev) if copy else v) for k, v in s.resident.items()}, model_dir)
    for name, mod in list(model.named_modules()):
        if name.startswith(prefix) or not type(mod).__name__.endswith("RotaryEmbedding"):
            continue
        if any(b.device != dev for b in mod.buffers(recurse=False)):
            _rebuild_rotary(model, name, mod, dev)
    # everything outside the layers must now be on the device
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not name.startswith(prefix) and t.device != dev:
            raise Error(22, "%s: %s is on %s, not in the checkpoint's resident tensors (it would not be on %s)"
                        % (model_dir, name, t.device, dev))
    targets = {}

    def target(i, mod, name):
        key = (i, name)
        if key not in targets:
            rel = name[len(prefix) + len(str(i)) + 1:] if name.startswith(prefix) else name
            path, _, leaf = rel.rpartition(".")
            sub = mod.get_submodule(path) if path else mod
            if leaf not in sub._parameters and leaf not in sub._buffers:
                raise Error(22, "%s: layer tensor %s has no place in %s" % (model_dir, name, type(mod).__name__))
            targets[key] = (sub, leaf)
        return targets[key]

    # Tier 1: one set of GPU buffers per window slot, kept for the whole run
    # and refilled in stream order (layer i uses set i % window, whose last
    # user, layer i - window, ran earlier on the same stream). A fresh
    # allocation per layer made torch's allocator, capped by a budget, give
    # memory back with cudaFree, which waits for the whole device, read
    # kernels included: every layer's reads then stopped the consumer.
    gbufs = [{} for _ in range(s.stats()["window"])] if copy else None

    def gpu_copy(i, rel, t):
        bufs = gbufs[i % len(gbufs)]
        b = bufs.get(rel)
        if b is None or b.shape != t.shape or b.dtype != t.dtype:
            b = bufs[rel] = torch.empty(t.shape, dtype=t.dtype, device=dev)
        return b.copy_(t, non_blocking=True)

    def pre(i):
        def hook(mod, args, kwargs=None):
            for name, t in s.acquire(i).items():
                sub, leaf = target(i, mod, name)
                if copy:
                    t = gpu_copy(i, name[len(prefix) + len(str(i)) + 1:], t)
                if leaf in sub._parameters:
                    sub._parameters[leaf] = torch.nn.Parameter(t, requires_grad=False)
                else:
                    sub._buffers[leaf] = t
        return hook

    last = s.n_layers - 1

    def post(i):
        def hook(mod, args, out):
            s.release(i)
            if i == last:
                # every layer's reads of this pass done and good before the
                # model's output is used (a failed one was poisoned: NaN);
                # the host waits for the last layer's reads only, which the
                # GPU work queued so far waits for too
                s.check(i)
            if copy:
                # Tier 1: the layer lets go of its GPU buffers (they are the
                # next layer of its set's); kept, the module would hold them
                for (li, _), (sub, leaf) in targets.items():
                    if li == i:
                        if leaf in sub._parameters:
                            sub._parameters[leaf] = None
                        else:
                            sub._buffers[leaf] = None
        return hook

    for i, mod in enumerate(container):
        mod.register_forward_pre_hook(pre(i))
        mod.register_forward_hook(post(i))
    model._gpunvme_stream = s
    return s


# ---- mixture-of-experts models: experts read on demand (docs/moe.md) ------------------

# An expert's projections as the expert index names them (ExpertCache.projections) -> their
# role in transformers 5's fused experts module (gate_up_proj [E, 2I, H] with the gate rows
# first, down_proj [E, H, I]): per-expert checkpoints as save_pretrained writes them for
# Mixtral (w1 gate, w3 up, w2 down) and Qwen-MoE, or the fused tensors themselves.
_MOE_ROLES = {
    "w1.weight": "gate", "w3.weight": "up", "w2.weight": "down",
    "gate_proj.weight": "gate", "up_proj.weight": "up", "down_proj.weight": "down",
    "gate_up_proj": "gate_up", "down_proj": "down",
}

# checkpoint name -> module name, where save_pretrained writes the old layout (transformers 5's
# conversion mapping, reversed on save: Mixtral's .block_sparse_moe. is the model's .mlp.)
_MOE_RENAMES = ((".block_sparse_moe.", ".mlp."),)


class _MoELayer:
    """One experts module of the model, served from the cache: its forward
    is the reference's "eager" computation (transformers' experts module:
    the experts a token chose, in ascending id order, each one's output
    scaled and index_add_-ed into the result), with each expert's weights
    from its cache slot. The same operations in the same order on the same
    shapes as the resident model's eager experts, so the logits are bitwise
    equal to it (the test compares them)."""

    def __init__(self, cache, layer, roles, weights, act_fn, n_experts):
        self.cache, self.layer, self.roles, self.w = cache, layer, roles, weights
        self.act_fn, self.n_experts = act_fn, n_experts

    def _gate_up(self, s):
        """the expert in slot s (a 1-element CUDA tensor: no host wait) ->
        gate_up [2I, H], down [H, I], copies out of the slot (a slot is
        refilled by later fetches, in stream order after these copies)"""
        import torch
        r = self.roles

        def pick(p):
            return torch.index_select(self.w[r[p]], 0, s)[0]
        gu = pick("gate_up") if "gate_up" in r else torch.cat([pick("gate"), pick("up")], dim=0)
        return gu, pick("down")

    def _expert(self, s, bad, hidden_states, token_idx, top_k_pos, top_k_weights, final):
        import torch
        from torch.nn import functional as F
        gu, down = self._gate_up(s)
        current = hidden_states[token_idx]
        gate, up = F.linear(current, gu).chunk(2, dim=-1)
        h = self.act_fn(gate) * up
        h = F.linear(h, down)
        h = h * top_k_weights[token_idx, top_k_pos, None]
        # a failed read (slot -1): its contribution is NaN, never another
        # expert's numbers; sync() at the end of the forward raises it
        h = torch.where(bad, torch.full_like(h, float("nan")), h)
        final.index_add_(0, token_idx, h.to(final.dtype))

    def _decode(self, hidden_states, top_k_index, top_k_weights, final, k):
        """One token. The router's ids go to the reads as they are, no host
        wait between the router and the reads (the GPU threads pick the
        misses and read them). The k experts' weights are then gathered out
        of their slots once per projection, and the experts run in
        ascending id order, as the reference's loop does, each a view of the
        gathered weights: the per-expert operations (linear, activation,
        linear, weight, index_add_) are the reference's on the same values,
        shapes and alignment, so the logits stay bitwise equal, with a
        handful of kernels per layer instead of per expert (the host thread
        queuing kernels bounded a fine-grained model's decode:
        bench/results/moe-2026-11-27)."""
        import torch
        from torch.nn import functional as F
        slots = self.cache.fetch(self.layer, top_k_index.reshape(-1).to(torch.int32))
        order = torch.argsort(top_k_index[0])
        sl = slots[order].long()
        bad = (sl < 0).any()
        sl = sl.clamp(min=0)
        r = self.roles

        def pick(p):
            return torch.index_select(self.w[r[p]], 0, sl)
        gu = pick("gate_up") if "gate_up" in r else torch.cat([pick("gate"), pick("up")], dim=1)
        down = pick("down")
        # the reference takes each expert's weights as a view of its stacked
        # parameter; these views must sit on the same 256-byte boundaries
        # (cuBLAS picks kernels by alignment), else one copy per expert
        views = gu.stride(0) * gu.element_size() % 256 == 0 and down.stride(0) * down.element_size() % 256 == 0
        token_idx = torch.zeros(1, dtype=torch.long, device=hidden_states.device)
        current = hidden_states[token_idx]
        w = top_k_weights[0][order]
        for j in range(k):
            g = gu[j] if views else gu[j].clone()
            d = down[j] if views else down[j].clone()
            gate, up = F.linear(current, g).chunk(2, dim=-1)
            h = F.linear(self.act_fn(gate) * up, d)
            h = h * w[j:j + 1].view(1, 1)
            final.index_add_(0, token_idx, h.to(final.dtype))
        # a failed read (slot -1): the layer's output is NaN, never another
        # expert's numbers; sync() at the end of the forward raises it
        return torch.where(bad, torch.full_like(final, float("nan")), final)

    def forward(self, hidden_states, top_k_index, top_k_weights):
        import torch
        final = torch.zeros_like(hidden_states)
        T, k = top_k_index.shape
        if T == 1:
            return self._decode(hidden_states, top_k_index, top_k_weights, final, k)
        # prefill: the reference's own expert loop (its host wait included);
        # the experts hit are read in groups of at most the cache's slots,
        # each group before its experts run, in ascending id order
        with torch.no_grad():
            mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.n_experts).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0]
        n = self.cache.slots
        for g in range(0, hit.numel(), n):
            group = hit[g:g + n]
            slots = self.cache.fetch(self.layer, group.to(torch.int32))
            for j in range(group.numel()):
                e = group[j]
                top_k_pos, token_idx = torch.where(mask[e])
                sl = slots[j:j + 1].long()
                self._expert(sl.clamp(min=0), sl < 0, hidden_states, token_idx, top_k_pos, top_k_weights, final)
        return final


def moe_decoder(model, uri, model_dir, slots, device="cuda", *, tier=None, nsid=1, partition=None, offset=None):
    """Run a transformers mixture-of-experts model (Mixtral, Qwen2-MoE,
    Qwen3-MoE: transformers 5's fused experts modules, `...layers.L.mlp.experts`
    with gate_up_proj and down_proj) with every tensor outside the experts
    resident on the GPU and the experts read on demand, by GPU threads, into
    a GPU expert cache of `slots` experts (all layers together; at least the
    router's top-k). Build the model on the meta device (`with
    torch.device("meta"): AutoModelForCausalLM.from_config(config,
    torch_dtype=...)`). A decode step's expert reads are queued from the
    router's ids with no host wait; a prefill reads the experts its tokens
    chose, in groups of at most `slots`. A failed read raises gpunvme.Error
    from the forward. tier: where the slots are, 2 (GPU memory) or 1 (pinned
    host memory, read in place over the link); None: the library's policy.
    Returns the ExpertCache (sync() -> its statistics; resident_bytes: the
    resident tensors, in the library's memory, which torch's allocator
    statistics do not count); the model keeps it as model._gpunvme_experts."""
    from ._moe import ExpertCache
    from ._volumes import _volume
    vol, own = _volume(uri, nsid, partition, offset)
    try:
        cache = ExpertCache(vol, model_dir, slots, framework="pt", device=device, tier=tier)
    except BaseException:
        if own:
            vol.close()
        raise
    if own:
        cache._vol = vol  # the cache's volume now: closed by cache.close()
    cache.slots = slots
    try:
        _moe_model(model, vol, model_dir, cache, slots)
    except BaseException:
        cache.close()
        raise
    return cache


def _moe_model(model, vol, model_dir, cache, slots):
    """moe_decoder's work on the model, once the cache is open"""
    import re
    import torch
    from ._safetensors import load_pretrained
    from ._volumes import _path
    dev = torch.device(cache.device)
    k = getattr(getattr(model, "config", None), "num_experts_per_tok", None)
    if isinstance(k, int) and slots < k:
        raise Error(22, "slots=%d: fewer than the router's top-k (%d experts per token); at least %d"
                    % (slots, k, k))
    roles = {}
    for p in cache.projections:
        if p not in _MOE_ROLES:
            raise Error(95, "%s: expert projection %r is not a layout transformers' fused experts take "
                            "(known: %s)" % (model_dir, p, ", ".join(sorted(_MOE_ROLES))))
        roles[_MOE_ROLES[p]] = p
    if not ({"gate", "up", "down"} <= set(roles) or {"gate_up", "down"} <= set(roles)):
        raise Error(95, "%s: expert projections %s: need gate, up and down (or gate_up and down)"
                    % (model_dir, cache.projections))
    mods = {}
    for name, mod in model.named_modules():
        m = re.search(r"(?:^|\.)layers\.(\d+)\.mlp\.experts$", name)
        if m and hasattr(mod, "gate_up_proj") and hasattr(mod, "down_proj"):
            mods[int(m.group(1))] = mod
    if sorted(mods) != sorted(cache.layers):
        raise Error(22, "%s: the checkpoint has experts in layers %s, the model's fused experts modules are in "
                        "layers %s" % (model_dir, sorted(cache.layers), sorted(mods)))
    for layer, mod in mods.items():
        if getattr(mod, "num_experts", cache.n_experts) != cache.n_experts:
            raise Error(22, "%s: layer %d has %d experts in the checkpoint, %d in the model"
                        % (model_dir, layer, cache.n_experts, mod.num_experts))
    # every tensor but the experts, resident
    experts = set()
    for layer in cache.layers:
        for e in range(cache.n_experts):
            experts.update(name for name, _off, _n in cache.pieces(layer, e))
    resident = [t[0] for t in vol.open_model(_path(model_dir)).tensors() if t[0] not in experts]
    sd = load_pretrained(vol, model_dir, device=str(dev), tensors=resident)
    # the library's GPU memory besides the slots (torch's allocator does
    # not count it): what a budget must add to torch's peak
    cache.resident_bytes = sum(t.numel() * t.element_size() for t in sd.values())
    for old, new in _MOE_RENAMES:
        sd = {k.replace(old, new): v for k, v in sd.items()}
    _load_resident(model, sd, model_dir)
    for name, mod in list(model.named_modules()):
        if type(mod).__name__.endswith("RotaryEmbedding") and any(b.device != dev for b in mod.buffers(recurse=False)):
            _rebuild_rotary(model, name, mod, dev)
    served = {}
    for layer, mod in mods.items():
        # the experts' stacked parameters hold nothing: the slots do
        for p in ("gate_up_proj", "down_proj"):
            mod._parameters[p] = torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16, device=dev),
                                                    requires_grad=False)
        served[layer] = _MoELayer(cache, layer, roles, cache.weights(layer), mod.act_fn, cache.n_experts)

        # an instance attribute: nn.Module.__call__ runs it instead of the
        # class's forward (transformers' experts-implementation dispatch)
        mod.forward = served[layer].forward
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.device != dev:
            raise Error(22, "%s: %s is on %s, not in the checkpoint's resident tensors" % (model_dir, name, t.device))

    def done(_mod, _args, out):
        # every read of this forward done and good before its output is
        # used (a failed one made its expert's output NaN)
        cache.sync()
        return out
    model.register_forward_hook(done)
    model._gpunvme_experts = cache
    cache._served = served

