# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme.ExpertCache(device="cuda"): the GPU expert cache from torch (skipped
without torch, CUDA and a GPU). The router's ids are a CUDA tensor; fetch()
queues the reads of the missing experts on the current stream and returns
their slots; weights() views the slot memory; every chosen expert's bytes
are compared with the file; counts against the CPU cache fed the same ids;
through an ext4 image and an md RAID0. Label: run by `pytest` on the GPU
machine (bench/coherence_gpu_run.sh phase py runs python/tests)."""
import os
import time

import numpy as np
import pytest

import gpunvme
from test_moe import moe_images, tcp_uri  # noqa: F401 (the fixtures)

torch = pytest.importorskip("torch")
if not (gpunvme.HAVE_CUDA and torch.cuda.is_available()):
    pytest.skip("needs the extension built with CUDA, torch with CUDA and a GPU", allow_module_level=True)


def route(t, layer, n):
    """a skewed top-2 router, computed here on the host and sent to the GPU"""
    rng = np.random.default_rng(t * 131 + layer)
    a = int(rng.integers(0, 3)) if rng.random() < 0.75 else int(rng.integers(0, n))
    b = int(rng.integers(0, 3)) if rng.random() < 0.75 else int(rng.integers(0, n))
    return [a, b if b != a else (a + 1) % n]


# every kind of volume at every tier it has; NVMe/TCP: the policy's choice,
# tier 1 (its controller cannot DMA into GPU memory; tier 2 is refused below)
@pytest.mark.parametrize("which,tier,want", [(0, 2, 2), (0, 1, 1), (1, 2, 2), (2, 2, 2), (2, 1, 1), (3, None, 1)],
                         ids=["image-t2", "image-t1", "md-raid0-t2", "gpt-partition-t2", "gpt-partition-t1",
                              "nvme-tcp-policy"])
def test_fetch_every_byte(moe_images, tcp_uri, which, tier, want):
    uri = tcp_uri if which == 3 else moe_images["uris"][which]
    data = moe_images["mx"]
    with gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=3, framework="pt", device="cuda", tier=tier) as g, \
            gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=3) as h:
        assert g.tier == want
        for t in range(12):
            for layer in g.layers:
                ids = route(t, layer, g.n_experts)
                slots = g.fetch(layer, torch.tensor(ids, dtype=torch.int32, device="cuda"))
                w = g.weights(layer)
                # on the emulator a host thread must not block in CUDA
                # behind a fetch before its reads are done (test below)
                g.sync()
                t0 = time.perf_counter()
                got = {p: w[p][slots.long()].cpu() for p in g.projections}  # stream-ordered after the reads
                dt = time.perf_counter() - t0
                h.get(layer, ids)
                for j, e in enumerate(ids):
                    for k, p in enumerate(g.projections):
                        name = "model.layers.%d.block_sparse_moe.experts.%d.%s" % (layer, e, p)
                        if got[p][j].view(torch.uint8).numpy().tobytes() != data[name]:
                            try:
                                g.sync()
                                why = "sync() raised nothing"
                            except gpunvme.Error as x:
                                why = "sync(): %s" % x
                            pytest.fail("token %d layer %d: %s differs (slots %s, %.3f s to the host; %s)"
                                        % (t, layer, name, slots.tolist(), dt, why))
        st = g.sync()
        hst = h.stats()
        for k in ("requests", "hits", "misses", "evictions", "bytes_read"):
            assert st[k] == hst[k], (k, st[k], hst[k])
        assert st["commands"] > 0
        # the fetches that read, and the time the stream waited for them
        assert 0 < st["stalled"] <= 12 * len(g.layers) and st["stall_s"] > 0, st


def test_gpu_refusals(moe_images, tcp_uri):
    uri = moe_images["uris"][0]
    # tier 2 over NVMe/TCP: its controller cannot DMA into GPU memory
    with pytest.raises(gpunvme.Error, match="tier 2 \\(GPU memory\\) needs a controller"):
        gpunvme.ExpertCache(tcp_uri, "/m/model.safetensors", slots=3, framework="pt", device="cuda", tier=2)
    # tier 1 on an md array: one host buffer for several controllers
    with pytest.raises(gpunvme.Error, match="tier 1 on an md array"):
        gpunvme.ExpertCache(moe_images["uris"][1], "/m/model.safetensors", slots=3, framework="pt", device="cuda",
                            tier=1)
    with gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=3, framework="pt", device="cuda") as g:
        assert g.tier == 2  # the policy: the emulator DMAs into GPU memory
    with gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=2, framework="pt", device="cuda") as g:
        with pytest.raises(gpunvme.Error, match="1-D CUDA tensor"):
            g.fetch(0, torch.tensor([0, 1], dtype=torch.int32))
        with pytest.raises(gpunvme.Error, match="in GPU memory"):
            g.get(0, [0])
        g.fetch(0, torch.tensor([0, 9], dtype=torch.int32, device="cuda"))
        with pytest.raises(gpunvme.Error, match="past 4"):
            g.sync()
        g.fetch(0, torch.tensor([0, 1, 2], dtype=torch.int32, device="cuda"))
        with pytest.raises(gpunvme.Error, match="more distinct experts than its 2 slots"):
            g.sync()


def test_host_copy_behind_fetch(moe_images):
    """fetch, then at once a blocking host copy on the same stream, as a
    model's code might (`.cpu()`, `.item()`): must not stall"""
    uri = moe_images["uris"][0]
    with gpunvme.ExpertCache(uri, "/m/model.safetensors", slots=3, framework="pt", device="cuda") as g:
        for t in range(4):
            for layer in g.layers:
                ids = route(t, layer, g.n_experts)
                t0 = time.perf_counter()
                got = g.fetch(layer, torch.tensor(ids, dtype=torch.int32, device="cuda")).cpu().tolist()
                dt = time.perf_counter() - t0
                assert -1 not in got and dt < 2.0, (t, layer, got, dt)
        g.sync()
        # the copies ran in the emulator's DMA process, not a fallback here
        assert "gpunvme-emu-dma" in child_names(), child_names()


def child_names():
    """the names of this process's children"""
    names = []
    for task in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/children" % task) as f:
            for pid in f.read().split():
                try:
                    with open("/proc/%s/comm" % pid) as c:
                        names.append(c.read().strip())
                except OSError:
                    pass
    return names
