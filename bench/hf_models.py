#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Hugging Face checkpoints through gpunvme, on a CUDA machine with torch and
transformers (bench/python_load.sh runs every step in one device call).

  hf_models.py make ROOT [--big-gib G]
      ROOT/tiny: a tiny Llama from a config, random weights (seed 0), saved by
      save_pretrained(max_shard_size="300KB") into several shards + index;
      ROOT/big (with --big-gib): a Llama of about G GiB in bfloat16, random
      weights drawn on the GPU, save_pretrained(max_shard_size="2GB").
  hf_models.py check URI ROOT_DIR_IN_FS HOST_DIR
      the tiny model: from_pretrained(HOST_DIR) vs a model whose state dict
      comes from gpunvme.load_pretrained(URI, ROOT_DIR_IN_FS, device="cuda")
      via load_state_dict(sd, assign=True): logits must be bitwise equal.
  hf_models.py bench URI DIR_IN_FS HOST_DIR [--repeat N] [--only-ours] [--queues Q]
      time to a usable state dict on the GPU, same start line for all (the
      process running, CUDA initialised, the files in the page cache):
      gpunvme.load_pretrained, safetensors.torch.load_file(device="cuda")
      shard by shard, AutoModelForCausalLM.from_pretrained(device_map="cuda").
  hf_models.py breakdown URI DIR_IN_FS [--queues Q]
      load_pretrained's steps timed one by one (open, loader, alloc, load,
      DLPack wrap, free).
Prints one JSON object per result line.
"""
import glob
import json
import os
import sys
import time


def tiny_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=344, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       tie_word_embeddings=False, torch_dtype="float32")


def make(root, big_gib):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    m = LlamaForCausalLM(tiny_config())
    m.save_pretrained(os.path.join(root, "tiny"), max_shard_size="300KB", safe_serialization=True)
    shards = glob.glob(os.path.join(root, "tiny", "*.safetensors"))
    print(json.dumps({"made": "tiny", "shards": len(shards)}))
    if big_gib:
        # layers of a 7B-class shape; count chosen for the size asked
        h, inter, vocab = 4096, 11008, 32000
        per_layer = 4 * h * h + 3 * h * inter + 2 * h
        emb = 2 * vocab * h
        layers = max(1, int((big_gib * 2**30 / 2 - emb) // per_layer))
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                          num_attention_heads=32, num_key_value_heads=32, tie_word_embeddings=False,
                          torch_dtype="bfloat16")
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            big = LlamaForCausalLM(cfg)  # random init on the GPU: seconds, not minutes
        torch.set_default_dtype(torch.float32)
        t = time.time()
        big.save_pretrained(os.path.join(root, "big"), max_shard_size="2GB", safe_serialization=True)
        n = sum(p.numel() * p.element_size() for p in big.state_dict().values())
        print(json.dumps({"made": "big", "layers": layers, "bytes": n, "save_seconds": round(time.time() - t, 1),
                          "shards": len(glob.glob(os.path.join(root, "big", "*.safetensors")))}))
        del big
        torch.cuda.empty_cache()


def check(uri, fs_dir, host_dir):
    import torch
    import gpunvme
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
    ref = AutoModelForCausalLM.from_pretrained(host_dir, dtype=torch.float32).to("cuda").eval()
    sd = gpunvme.load_pretrained(uri, fs_dir, device="cuda")
    with torch.device("cuda"):
        ours = LlamaForCausalLM(ref.config)
    missing, unexpected = ours.load_state_dict(sd, assign=True, strict=True)
    ours.eval()
    same_tensors = all(torch.equal(sd[k], v) for k, v in ref.state_dict().items() if k in sd)
    devs = sorted({str(t.device) for t in sd.values()})
    torch.manual_seed(1)
    ids = torch.randint(0, ref.config.vocab_size, (2, 64), device="cuda")
    with torch.no_grad():
        a = ref(ids).logits
        b = ours(ids).logits
    ok = bool(torch.equal(a, b)) and same_tensors
    print(json.dumps({"check": "tiny-llama-logits", "tensors": len(sd), "devices": devs,
                      "state_dict_equal": same_tensors, "logits_bitwise_equal": bool(torch.equal(a, b)),
                      "max_abs_diff": float((a - b).abs().max()), "logits_shape": list(a.shape), "pass": ok}))
    return 0 if ok else 1


def bench(uri, fs_dir, host_dir, repeat, only_ours=False, queues=None):
    import torch
    import gpunvme
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # CUDA initialised before every clock
    shards = sorted(glob.glob(os.path.join(host_dir, "*.safetensors")))
    nbytes = sum(os.path.getsize(s) for s in shards)

    def timed(name, fn, note=""):
        for r in range(repeat):
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            s = time.perf_counter() - t
            n = sum(v.numel() * v.element_size() for v in out.values())
            devs = sorted({str(v.device) for v in out.values()})
            print(json.dumps({"method": name, "run": r, "seconds": round(s, 3), "tensor_bytes": n,
                              "file_bytes": nbytes, "gbps": round(n / s / 1e9, 2), "devices": devs,
                              "tensors": len(out), "note": note}), flush=True)
            del out
            torch.cuda.empty_cache()

    def ours_uri():
        return gpunvme.load_pretrained(uri, fs_dir, device="cuda", queues=queues)

    t = time.perf_counter()
    vol = gpunvme.Volume(uri)
    print(json.dumps({"volume_open_seconds": round(time.perf_counter() - t, 3), "uri": uri}), flush=True)

    def ours_vol():
        return gpunvme.load_pretrained(vol, fs_dir, device="cuda", queues=queues)

    def st():
        sd = {}
        for s in shards:
            sd.update(load_file(s, device="cuda"))
        return sd

    def hf():
        m = AutoModelForCausalLM.from_pretrained(host_dir, device_map="cuda", dtype=torch.bfloat16)
        sd = m.state_dict()
        return sd

    timed("gpunvme.load_pretrained(Volume)", ours_vol,
          "controller and file system opened before the clock; queues=%s; %s" % (queues, uri))
    if only_ours:
        vol.close()
        return 0
    # the URI form keeps its volume idle for the next call (_volumes.py):
    # its first run opens the emulated controller inside the clock, the
    # next ones take the kept volume; then the same with nothing kept
    # (GPUNVME_VOLUME_CACHE_S=0), every run opening its own
    gpunvme.release_volumes()
    timed("gpunvme.load_pretrained(uri)", ours_uri, "the volume cache on (default): run 0 opens the controller")
    gpunvme.release_volumes()
    keep = os.environ.get("GPUNVME_VOLUME_CACHE_S")
    os.environ["GPUNVME_VOLUME_CACHE_S"] = "0"
    try:
        timed("gpunvme.load_pretrained(uri), cache off", ours_uri, "GPUNVME_VOLUME_CACHE_S=0: opens the "
              "emulated controller inside the clock every run")
    finally:
        if keep is None:
            del os.environ["GPUNVME_VOLUME_CACHE_S"]
        else:
            os.environ["GPUNVME_VOLUME_CACHE_S"] = keep
    timed("safetensors.load_file(cuda) per shard", st, "page-cached files")
    timed("AutoModelForCausalLM.from_pretrained(device_map=cuda)", hf, "page-cached files")
    vol.close()
    return 0


def breakdown(uri, fs_dir, queues, repeat=3):
    """where a load_pretrained call's time goes, step by step (the internal
    calls load_file makes), next to the CLI's own load time"""
    import torch
    import gpunvme
    from gpunvme import _gpunvme
    torch.zeros(1, device="cuda")
    vol = gpunvme.Volume(uri)
    for r in range(repeat):
        t = [time.perf_counter()]
        m = vol.open_model(fs_dir)
        infos = gpunvme._index(m)
        t.append(time.perf_counter())
        ld = _gpunvme.Loader(m, 2, 0, queues or 0, 0)
        t.append(time.perf_counter())
        b = ld.select([i.index for i in infos.values()])
        t.append(time.perf_counter())
        b.load()
        torch.cuda.synchronize()
        t.append(time.perf_counter())
        ts = [gpunvme._wrap(_gpunvme.Tensor(b, k), i, "pt") for k, i in enumerate(infos.values())]
        t.append(time.perf_counter())
        del ts, b, ld, m
        t.append(time.perf_counter())
        names = ["open_model+index", "Loader (queues)", "select (alloc)", "load", "wrap (dlpack)", "free"]
        print(json.dumps({"breakdown": r, "queues": queues, **{n: round(t[k + 1] - t[k], 4) for k, n in
                                                                enumerate(names)}}), flush=True)
    vol.close()
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "make":
        big = float(argv[argv.index("--big-gib") + 1]) if "--big-gib" in argv else 0
        make(argv[2], big)
        return 0
    if len(argv) == 5 and argv[1] == "check":
        return check(argv[2], argv[3], argv[4])
    if len(argv) >= 5 and argv[1] == "bench":
        rep = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 2
        q = int(argv[argv.index("--queues") + 1]) if "--queues" in argv else None
        return bench(argv[2], argv[3], argv[4], rep, "--only-ours" in argv, q)
    if len(argv) >= 4 and argv[1] == "breakdown":
        q = int(argv[argv.index("--queues") + 1]) if "--queues" in argv else None
        return breakdown(argv[2], argv[3], q)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
