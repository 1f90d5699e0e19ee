# SPDX-License-Identifier: BSD-2-Clause
"""device="cuda" into torch tensors, compared byte for byte with the CPU
load and with the bytes the test wrote. Skipped without torch, without
the extension's CUDA backend, or without a GPU."""
import gc
import threading

import numpy as np
import pytest

import gpunvme

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (gpunvme.HAVE_CUDA and gpunvme.cuda_available() and torch.cuda.is_available()),
                                reason="needs torch with CUDA and gpunvme built with GPUNVME_CUDA=ON")


def tbytes(t):
    """a tensor's bytes, any dtype, any device"""
    t = t.detach().contiguous().cpu()
    if t.dim() == 0:
        t = t.reshape(1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


TORCH_OF = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
            "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "F64": "float64",
            "I64": "int64", "U64": "uint64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
            "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
            "F8_E5M2FNUZ": "float8_e5m2fnuz"}


@pytest.mark.parametrize("tier", [None, 1])
def test_load_file_cuda(models, tier):
    cpu = gpunvme.load_file(models.uri, "/m/every.safetensors", device="cpu", framework="pt")
    gpu = gpunvme.load_file(models.uri, "/m/every.safetensors", device="cuda:0", framework="pt", tier=tier)
    assert list(gpu) == list(cpu)
    for name, dt, shape, data in models.st_tensors:
        g = gpu[name]
        want_dev = "cuda" if tier is None else "cpu"  # tier 1: pinned host memory, CPU tensors
        assert g.device.type == want_dev, name
        assert tbytes(g) == tbytes(cpu[name]) == data, name
        tn = TORCH_OF.get(dt)
        if tn and hasattr(torch, tn):
            assert g.dtype == getattr(torch, tn) and tuple(g.shape) == tuple(shape), name
        assert g.is_contiguous()
    assert gpu.metadata == {"format": "pt", "who": "test"}


def test_load_pretrained_cuda(models):
    sd = gpunvme.load_pretrained(models.uri, "/hf", device="cuda")
    for n, data in models.hf_data.items():
        assert sd[n].is_cuda and tbytes(sd[n]) == data
    assert sd["b.w"].dtype == torch.bfloat16 and tuple(sd["b.w"].shape) == (2, 8)
    big = gpunvme.load_file(models.uri, "/m/big.safetensors", device="cuda", progress=True)
    for n, data in models.big_data.items():
        assert tbytes(big[n]) == data
    # usable by kernels right away
    s = sum(float(big[n].double().sum()) for n in big)
    ref = sum(float(np.frombuffer(d, np.float32).astype(np.float64).sum()) for d in models.big_data.values())
    assert s == pytest.approx(ref, rel=1e-9, nan_ok=True)


def test_gguf_cuda(models):
    sd = gpunvme.load_file(models.uri, "/m/q.gguf", device="cuda")
    for name, ty, ne, data in models.gg_t:
        assert sd[name].is_cuda and tbytes(sd[name]) == data, name
    assert sd["qk"].dtype == torch.uint8 and tuple(sd["qk"].shape) == (2, 288)
    assert sd["bf"].dtype == torch.bfloat16


def test_safe_open_cuda(models):
    with gpunvme.safe_open(models.uri, "/m/big.safetensors", framework="pt", device="cuda:0") as f:
        ts = [f.get_tensor(k) for k in f.keys()]  # many live tensors share one loader's queues
        rows = f.get_slice("layer.2.w")[5:9]
    for k, t in zip(sorted(models.big_data), ts):
        assert tbytes(t) == models.big_data[k]
    full = np.frombuffer(models.big_data["layer.2.w"], np.float32).reshape(64, 1024)
    assert tbytes(rows) == full[5:9].tobytes()


def test_cuda_tensors_outlive_volume_and_die_on_other_threads(models):
    vol = gpunvme.Volume(models.uri)
    sd = gpunvme.load_file(vol, "/m/big.safetensors", device="cuda")
    vol.close()
    del vol
    gc.collect()
    t = sd.pop("layer.0.w")
    assert tbytes(t) == models.big_data["layer.0.w"]
    # the last reference dropped on a thread without the GIL held by Python
    box = [sd]
    del sd
    th = threading.Thread(target=box.clear)
    th.start()
    th.join()
    torch.cuda.synchronize()
    assert tbytes(t) == models.big_data["layer.0.w"]


def test_repeated_cuda_loads_release_memory(models):
    vol = gpunvme.Volume(models.uri)
    for _ in range(20):
        gpunvme.load_file(vol, "/m/big.safetensors", device="cuda")
    gc.collect()
    free0, _ = torch.cuda.mem_get_info()
    for _ in range(100):
        sd = gpunvme.load_file(vol, "/m/big.safetensors", device="cuda")
        del sd
    gc.collect()
    free1, _ = torch.cuda.mem_get_info()
    vol.close()
    assert free0 - free1 < (64 << 20), "GPU memory fell by %d bytes over 100 loads" % (free0 - free1)


def test_kept_memory_back_at_close(models):
    """A volume's loader keeps the GPU memory of loads whose tensors are gone
    for its next load (docs/python.md; gpu.loader.kept_memory checks that the
    same block comes back): the next loads of the same file land byte for
    byte in it, and close() gives it all back."""
    gc.collect()
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    vol = gpunvme.Volume(models.uri)
    for i in range(3):
        sd = gpunvme.load_file(vol, "/m/big.safetensors", device="cuda")
        for n, data in models.big_data.items():
            assert tbytes(sd[n]) == data, (i, n)
        del sd
        gc.collect()
    vol.close()
    gc.collect()
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    assert free0 - free1 < (64 << 20), "GPU memory fell by %d bytes after close()" % (free0 - free1)


def test_cuda_first_loader_gone(models):
    """the controller's first GPU loader destroyed while a later one still
    reads: the first mapped the doorbells for the GPU and the later one uses
    that mapping, which must stay (its doorbell writes faulted otherwise:
    an illegal address). Every byte, through the second safe_open."""
    with gpunvme.Volume(models.uri) as vol:
        f1 = gpunvme.safe_open(vol, "/m/big.safetensors", framework="pt", device="cuda:0")
        a = f1.get_tensor("layer.0.w")  # the controller's first GPU loader
        f2 = gpunvme.safe_open(vol, "/m/big.safetensors", framework="pt", device="cuda:0")
        assert tbytes(f2.get_tensor("layer.1.w")) == models.big_data["layer.1.w"]
        f1.close()
        del a, f1
        gc.collect()
        for k in sorted(models.big_data):
            assert tbytes(f2.get_tensor(k)) == models.big_data[k], k
        f2.close()
