# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: the transformers integration: a decoder whose layers are streamed."""
from ._gpunvme import Error
from ._stream import LayerStream


def _rebuild_rotary(model, module_name, module, dev):
    """A rotary embedding's inv_freq is a non-persistent buffer (not in the
    checkpoint): built again on the device from the model's config."""
    parent = model.get_submodule(module_name.rsplit(".", 1)[0]) if "." in module_name else model
    leaf = module_name.rsplit(".", 1)[-1]
    import torch
    with torch.device(dev):  # its buffers are made on dev (the device= argument is deprecated)
        setattr(parent, leaf, type(module)(config=model.config))


def stream_decoder(model, uri, model_dir, layers="model.layers.{i}.", window=2, device="cuda", **kw):
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
    model._gpunvme_stream."""
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
    res = {k: (v.to(dev) if copy else v) for k, v in s.resident.items()}
    missing, unexpected = model.load_state_dict(res, strict=False, assign=True)
    if unexpected:
        raise Error(22, "%s: tensors the model does not have: %s" % (model_dir, ", ".join(sorted(unexpected)[:5])))
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
        model.tie_weights()
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
