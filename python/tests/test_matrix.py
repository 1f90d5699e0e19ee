# SPDX-License-Identifier: BSD-2-Clause
"""The combination matrix (issue 31): every entry point x every volume x
every tier, each cell comparing every byte it reads with the source files.

Entry points: the CLI's `cat` and `load --verify --json` (per-tensor sha256),
`load_file`, `safe_open` (`get_tensor` and `get_slice`), `load_pretrained`,
`transformers` (load_pretrained of a tiny Llama into LlamaForCausalLM; needs
torch and transformers), `Volume.read`, the C layer stream (tests/matrix/matrix_stream.c) and Python's
`stream`. Volumes: an emulated controller on an ext4 image file, the same
image served from RAM (`?snapshot=1`: a RAM copy of the image; with 4 KiB
LBAs), a GPT disk whose file system is in its second partition (found by the
library; the partition starts 1.5 KiB past a 4 KiB boundary), the
committed mdadm RAID0 and linear fixtures (tests/md/fixtures), a RAID0 of 4
members striped from the image (bench/md_mkraid0.py), NVMe/TCP to the
suite's fake target (gpunvme-fake-target on loopback) and QEMU's controller
(its cells are refused here: they run in the QEMU suite's qemu.matrix_vfio,
which prints the column's own table: the CLI's cat and load --verify and
the C layer stream on the CPU tier run in the guest, every other cell is
refused there with a checked reason, the Python entry points with "no
Python in the guest"). Tiers: the CPU tier, Tier 1 and Tier 2.

The source files: a model written by gpunvme-mkmodel (and a Hugging Face
directory of two shards holding its tensors, for load_pretrained); on the md
fixtures the model the fixture script wrote with gpunvme-mkmodel, written
again here and checked against the fixture's sha256 manifest.

A cell that cannot run is a refusal with a reason, and the reason is checked
against the one this table expects (expect() below): the product's own
refusal where there is one (a GPU tier without CUDA, Tier 2 over TCP), else a
reason of the test's. So no cell vanishes: a cell expected to run that is
refused fails, as does one refused for another reason, or one that runs
where a refusal was expected. A cell failing through a known product bug
is listed in KNOWN_BUGS (an xfail naming the bug). The table (cells run,
refused with reason, failed) is printed at the end of the pytest run
(conftest.py).

The same test runs the GPU cells on a GPU machine: gpunvme built with
GPUNVME_CUDA=ON, torch with CUDA, the tree built with CUDA (build/bin/
matrix_stream links the CUDA backend); `ctest -L gpu` runs it so
(gpu.matrix, tests/matrix/gpu_matrix.sh, GPUNVME_MATRIX_GPU=1: every GPU
cell must run). GPUNVME_BUILD names the CMake build directory (default:
build/ at the top of the repository).
"""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpunvme
from conftest import MATRIX, gpt_disk, st_bytes, tiny_llama_cfg

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("GPUNVME_BUILD", REPO / "build"))
BIN = BUILD / "bin"
FIXTURES = REPO / "tests" / "md" / "fixtures"
MD_MODEL = "/models/model.safetensors"
NQN = "nqn.2026-11.io.gpunvme:fake"

ENTRIES = ["cli cat", "cli load --verify", "load_file", "safe_open", "load_pretrained", "transformers",
           "Volume.read", "C layer stream", "py stream"]
VOLUMES = ["emu file", "emu RAM", "GPT partition", "md RAID0", "md linear", "md RAID0 x4", "NVMe/TCP", "QEMU vfio"]
MD_FIXTURE = {"md RAID0", "md linear"}  # the committed mdadm fixtures
TIERS = ["cpu", "tier1", "tier2"]
CPU_ONLY = {"cli cat", "Volume.read"}  # no tier: the CPU reads the file system
# The QEMU vfio column runs in this ctest of the QEMU suite (ctest -L qemu):
# every entry point x tier there ran, or was refused with a checked reason
# (tests/qemu/matrix_guest.sh, matrix_table.py reads ENTRIES from here)
QEMU_TEST = "qemu.matrix_vfio"


class Refused(Exception):
    """a cell that cannot run here; str() is the reason"""


# ---- what this machine can do ---------------------------------------------------

def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


TORCH = _torch()
try:
    import transformers as TRANSFORMERS
except ImportError:
    TRANSFORMERS = None
CUDA_PY = gpunvme.cuda_available()
GPU_REASON = None if CUDA_PY else (
    "no GPU: built without CUDA" if not gpunvme.HAVE_CUDA else "no GPU: no CUDA device visible")


def _gpu_present():
    """a CUDA GPU on this machine, whatever the builds (nvidia-smi -L)"""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.startswith(b"GPU")


GPU_PRESENT = _gpu_present()
# GPUNVME_MATRIX_GPU=1 (the GPU machine, tests/matrix/gpu_matrix.sh): the
# GPU cells must run; a missing GPU, CUDA build or torch fails them
MUST_GPU = os.environ.get("GPUNVME_MATRIX_GPU") == "1"
NATIVE = {"cli cat", "cli load --verify", "C layer stream"}  # programs: no Python framework

# Cells that fail through a known product bug: (entry, volume, tier) -> the
# bug (issue number and one line). Such a cell is an xfail in the table; once
# it passes it fails ("XPASS") until its entry here is removed. Empty: no
# cell fails on the CPU machine (2026-11-27).
KNOWN_BUGS = {}


def expect(entry, volume, tier):
    """None: the cell must run and pass; else a regular expression the
    refusal's reason must match"""
    if volume == "QEMU vfio":
        return re.escape("runs in the QEMU suite: " + QEMU_TEST)
    if tier != "cpu" and entry in CPU_ONLY:
        return "no tier: %s reads on the CPU" % entry
    if entry == "transformers" and (TORCH is None or TRANSFORMERS is None):
        return r"needs torch\+transformers"
    if entry == "transformers" and volume in MD_FIXTURE:
        return "the md fixtures hold no transformers model"
    if tier == "cpu":
        return None
    if volume == "NVMe/TCP" and tier == "tier2" and entry == "cli load --verify":
        # the one tier policy (tier.h) looks at the volume before the GPU:
        # TCP cannot DMA into GPU memory, on any machine
        return "DMA into GPU memory"
    if not MUST_GPU:
        # the programs (the CLI, matrix_stream) refuse a GPU tier
        # themselves: built without CUDA, or no GPU
        if entry in NATIVE and not GPU_PRESENT:
            return {"cli load --verify": "needs a CUDA GPU"}.get(entry, "built without CUDA|no GPU")
        # the Python entry points: the extension's refusal when it was
        # built without CUDA, else this test's when no GPU is usable
        if entry not in NATIVE and GPU_REASON:
            return "built without CUDA" if not gpunvme.HAVE_CUDA else "no GPU"
        if entry not in NATIVE and TORCH is None:
            return "needs torch"
    if volume == "NVMe/TCP" and tier == "tier2":
        # no bus addresses for GPU memory over TCP (docs/nvme-tcp.md):
        # the tier policy's refusal (tier.h), or the control plane's
        # (gpunvme_ctrl_map_device) for an entry that asks it directly
        return "DMA into GPU memory|bus address"
    return None


# ---- the source files and volumes --------------------------------------------------

def st_tensors(blob):
    """safetensors bytes -> {name: (dtype, shape, tensor bytes)} in header order"""
    n = struct.unpack("<Q", blob[:8])[0]
    hdr = json.loads(blob[8:8 + n])
    base = 8 + n
    return {k: (v["dtype"], v["shape"], blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in hdr.items() if k != "__metadata__"}


def _bin(name):
    p = BIN / name
    if not p.exists():
        pytest.fail("%s is not built: make build (or set GPUNVME_BUILD to the CMake build directory)" % p)
    return p


class Vol:
    def __init__(self, uri, model, model_file, pretrained, pretrained_data):
        self.uri = uri                          # volume URI
        self.model = model                      # the model's path in the volume
        self.model_file = model_file            # ... its source file on the host
        self.src = Path(model_file).read_bytes()
        self.tensors = st_tensors(self.src)
        self.pretrained = pretrained            # load_pretrained's path in the volume
        self.pretrained_data = pretrained_data  # {name: bytes} of what it loads


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """an ext4 image with a gpunvme-mkmodel model and a Hugging Face
    directory (two shards and an index) holding the same tensors"""
    if not shutil.which("mkfs.ext4"):
        pytest.fail("mkfs.ext4 (e2fsprogs) is not installed")
    w = tmp_path_factory.mktemp("matrix")
    root = w / "root"
    (root / "m").mkdir(parents=True)
    (root / "hf").mkdir()
    model = root / "m" / "model.safetensors"
    subprocess.run([str(_bin("gpunvme-mkmodel")), "--format", "safetensors", "--size", "4M", "--seed", "31",
                    "-o", str(model)], check=True, stdout=subprocess.DEVNULL)
    ts = st_tensors(model.read_bytes())
    names = list(ts)
    half = len(names) // 2
    wm, hf_data = {}, {}
    for k, part in enumerate((names[:half], names[half:])):
        fn = "model-%05d-of-00002.safetensors" % (k + 1)
        blob, d = st_bytes([(n, ts[n][0], ts[n][1], ts[n][2]) for n in part], {"format": "pt"})
        (root / "hf" / fn).write_bytes(blob)
        hf_data.update(d)
        wm.update(dict.fromkeys(part, fn))
    (root / "hf" / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    tiny = None
    if TORCH is not None and TRANSFORMERS is not None:
        # the transformers cells: a tiny Llama saved as shards of 40 KB
        TORCH.manual_seed(0)
        cfg = tiny_llama_cfg(TRANSFORMERS)
        TRANSFORMERS.LlamaForCausalLM(cfg).eval().save_pretrained(str(root / "tiny"), max_shard_size="40KB",
                                                                  safe_serialization=True)
        data = {}
        for f in sorted((root / "tiny").glob("*.safetensors")):
            data.update({n: t[2] for n, t in st_tensors(f.read_bytes()).items()})
        tiny = (cfg, data)
    img = w / "fs.ext4"
    subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-d", str(root), str(img), "24M"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return w, img, model, hf_data, tiny


def _md_volume(w, name):
    if not shutil.which("zstd"):
        pytest.fail("zstd is not installed (apt-get install zstd): the md fixtures are compressed")
    d = w / name
    d.mkdir()
    members = []
    k = 0
    while (FIXTURES / ("%s.m%d.img.zst" % (name, k))).exists():
        out = d / ("m%d.img" % k)
        subprocess.run(["zstd", "-dqf", str(FIXTURES / ("%s.m%d.img.zst" % (name, k))), "-o", str(out)],
                       check=True)
        members.append("emu:%s" % out)
        k += 1
    # the model the fixture script wrote (scripts/fixtures/make-md-fixtures.sh)
    src = d / "model.safetensors"
    subprocess.run([str(_bin("gpunvme-mkmodel")), "--format", "safetensors", "--size", "1M", "--seed", "17",
                    "--compressible", "-o", str(src)], check=True, stdout=subprocess.DEVNULL)
    want = next(line.split()[0] for line in (FIXTURES / (name + ".manifest")).read_text().splitlines()
                if line.endswith(" " + MD_MODEL))
    assert hashlib.sha256(src.read_bytes()).hexdigest() == want, "gpunvme-mkmodel no longer writes the fixture's model"
    # members in reverse order: the array is assembled from the superblocks
    return Vol("md:" + ";".join(reversed(members)), MD_MODEL, src, MD_MODEL,
               {n: t[2] for n, t in st_tensors(src.read_bytes()).items()})


@pytest.fixture(scope="module")
def volumes(source):
    w, img, model, hf_data, tiny = source
    vols = {}

    def plain(uri):
        v = Vol(uri, "/m/model.safetensors", model, "/hf", hf_data)
        v.tiny = tiny
        return v
    vols["emu file"] = plain("emu:%s" % img)
    # a RAM copy of the image, served with 4 KiB LBAs
    vols["emu RAM"] = plain("emu:%s?snapshot=1&lbads=12" % img)
    # the file system in partition 2 of 2 (partition 1 empty), at a start
    # 1.5 KiB past a 4 KiB boundary: file blocks are not 4 KiB-aligned LBAs
    (w / "gpt").mkdir()
    uri, starts = gpt_disk(w / "gpt", str(img), [2], first=2051)
    assert starts[1] % 8 == 3
    vols["GPT partition"] = plain(uri)
    vols["md RAID0"] = _md_volume(w, "r0-v12-c64-ext4")
    vols["md linear"] = _md_volume(w, "linear-v12-ext4")
    # the image itself striped over 4 members, 16 KiB chunks (as mdadm lays
    # out a RAID0 with 1.2 metadata: bench/md_mkraid0.py), members reversed:
    # the source model has several layers, the fixtures' one
    (w / "r0x4").mkdir()
    subprocess.run([sys.executable, str(REPO / "bench" / "md_mkraid0.py"), str(img), "4", "16", str(w / "r0x4" / "m")],
                   check=True, stdout=subprocess.DEVNULL)
    vols["md RAID0 x4"] = plain("md:" + ";".join("emu:%s" % (w / "r0x4" / ("m%d.img" % k)) for k in (3, 2, 1, 0)))
    # the fake target on loopback, serving a copy of the image
    timg = w / "tcp.ext4"
    shutil.copyfile(img, timg)
    ft = subprocess.Popen([str(_bin("gpunvme-fake-target")), "--image", str(timg)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = ft.stdout.readline().decode()  # "port N"
    if not line.split()[1:]:
        ft.kill()
        pytest.fail("the fake target did not start: %s %s" % (line, ft.stderr.read().decode()))
    vols["NVMe/TCP"] = plain("tcp://127.0.0.1:%s/%s" % (line.split()[1], NQN))
    yield vols
    ft.stdin.close()  # the target runs until its stdin closes
    try:
        ft.wait(timeout=10)
    except subprocess.TimeoutExpired:
        ft.kill()
        ft.wait()


# ---- comparing ------------------------------------------------------------------------

def raw(t):
    """a loaded tensor's bytes (numpy, or torch on any device)"""
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t).view(np.uint8).tobytes()
    torch = TORCH
    if CUDA_PY:
        # Tier 1 tensors are pinned host memory the reads fill in stream
        # order: the CPU reads them after the streams are done
        torch.cuda.synchronize()
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def same_dict(sd, want, what, ordered=True):
    if ordered:
        assert list(sd) == list(want), "%s: tensor names differ" % what
    assert sorted(sd) == sorted(want), "%s: tensor names differ" % what
    for n, b in want.items():
        got = raw(sd[n])
        if got != b:
            k = next((i for i in range(min(len(got), len(b))) if got[i] != b[i]), min(len(got), len(b)))
            raise AssertionError("%s: tensor %s differs from the source at byte %d of %d" % (what, n, k, len(b)))


def py_dev(tier):
    if tier == "cpu":
        return dict(device="cpu", framework="numpy")
    # numpy without torch: a build without CUDA then refuses the device
    # (with framework="pt" it would refuse the missing torch first)
    return dict(device="cuda", framework="pt" if TORCH else "numpy", tier=int(tier[-1]))


def gpu_error(e):
    """a GPU-tier refusal of the product, as a Refused"""
    if isinstance(e, gpunvme.Error) and any(s in str(e) for s in ("without CUDA", "GPUNVME_CUDA=ON", "bus address",
                                                                  "no GPU", "DMA into GPU memory")):
        raise Refused(str(e)) from e
    raise e


# ---- the entry points ---------------------------------------------------------------

def run_cli(v, args, timeout=120):
    return subprocess.run([str(_bin("gpunvme"))] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout)


def cell_cli_cat(v, tier):
    r = run_cli(v, ["cat", v.uri, v.model])
    assert r.returncode == 0, "gpunvme cat: rc %d: %s" % (r.returncode, r.stderr.decode().strip())
    assert r.stdout == v.src, "gpunvme cat: %d bytes, differ from the source" % len(r.stdout)


def cell_cli_load(v, tier):
    t = "cpu" if tier == "cpu" else tier[-1]
    r = run_cli(v, ["load", v.uri, v.model, "--tier", t, "--verify", "--json", "--no-progress"])
    err = r.stderr.decode().strip()
    if r.returncode and tier != "cpu" and any(s in err for s in ("CUDA", "no GPU", "bus address", "DMA into GPU memory")):
        raise Refused(err)
    assert r.returncode == 0, "gpunvme load: rc %d: %s" % (r.returncode, err)
    j = json.loads(r.stdout)
    assert j["verified"] is True and j["tier"] == t, (j["verified"], j["tier"])
    got = {x["name"]: x["sha256"] for x in j["tensors"]}
    want = {n: hashlib.sha256(b[2]).hexdigest() for n, b in v.tensors.items()}
    assert got == want, "gpunvme load --json: tensor sha256 differ from the source: %s" % sorted(
        n for n in want if got.get(n) != want[n])[:5]


def cell_load_file(v, tier):
    try:
        sd = gpunvme.load_file(v.uri, v.model, **py_dev(tier))
    except gpunvme.Error as e:
        gpu_error(e)
    same_dict(sd, {n: t[2] for n, t in v.tensors.items()}, "load_file")


def cell_safe_open(v, tier):
    d = py_dev(tier)
    try:
        f = gpunvme.safe_open(v.uri, v.model, framework=d["framework"], device=d["device"], tier=d.get("tier"))
    except gpunvme.Error as e:
        gpu_error(e)
    with f:
        assert list(f.keys()) == list(v.tensors)
        for n, (dtype, shape, b) in v.tensors.items():
            assert raw(f.get_tensor(n)) == b, "get_tensor(%s) differs from the source" % n
            sl = f.get_slice(n)
            assert list(sl.get_shape()) == list(shape) and sl.get_dtype() == dtype, n
            assert raw(sl[:]) == b, "get_slice(%s)[:] differs from the source" % n
            if len(shape) >= 1 and shape[0] >= 3:
                row = len(b) // shape[0]
                assert raw(sl[1:3]) == b[row:3 * row], "get_slice(%s)[1:3] differs from the source" % n


def cell_load_pretrained(v, tier):
    try:
        sd = gpunvme.load_pretrained(v.uri, v.pretrained, **py_dev(tier))
    except gpunvme.Error as e:
        gpu_error(e)
    same_dict(dict(sd), v.pretrained_data, "load_pretrained", ordered=False)


def cell_transformers(v, tier):
    """load_pretrained of a Hugging Face Llama's shards into the model
    (assign=True): the bytes, then the logits equal those of the model
    given the source files' tensors on the same device, bit for bit"""
    torch, tf = TORCH, TRANSFORMERS
    cfg, data = v.tiny
    d = py_dev(tier)
    d["framework"] = "pt"
    try:
        sd = gpunvme.load_pretrained(v.uri, "/tiny", **d)
    except gpunvme.Error as e:
        gpu_error(e)
    same_dict(dict(sd), data, "load_pretrained /tiny", ordered=False)
    # where the tensors are: Tier 1's are CPU tensors in pinned host memory
    # (docs/python.md), the model and its reference then run on the CPU
    dev = next(iter(sd.values())).device

    def model(state):
        with torch.device("meta"):
            m = tf.LlamaForCausalLM(cfg).eval()
        m.load_state_dict(state, assign=True, strict=True)
        gpunvme._rebuild_rotary(m, "model.rotary_emb", m.model.rotary_emb, dev)
        return m
    ref = model({n: torch.frombuffer(bytearray(b), dtype=torch.uint8).view(sd[n].dtype).reshape(sd[n].shape).to(dev)
                 for n, b in data.items()})
    m = model(sd)
    ids = torch.arange(12).reshape(1, 12).to(dev)
    with torch.no_grad():
        assert torch.equal(ref(ids).logits, m(ids).logits), "transformers: logits differ"


def cell_volume_read(v, tier):
    with gpunvme.Volume(v.uri) as vol:
        assert vol.read(v.model) == v.src, "Volume.read: the whole file differs from the source"
        assert vol.read(v.model, 4097, 300001) == v.src[4097:4097 + 300001], "Volume.read(4097, 300001) differs"
        assert vol.stat(v.model)["size"] == len(v.src)


def cell_c_stream(v, tier):
    t = "cpu" if tier == "cpu" else tier[-1]
    r = subprocess.run([str(_bin("matrix_stream")), v.uri, v.model, str(v.model_file), t], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    out, err = r.stdout.decode(), r.stderr.decode().strip()
    if r.returncode == 77:
        raise Refused(out.strip().replace("REFUSED: ", ""))
    if r.returncode and ("bus address" in err or "DMA into GPU memory" in err):
        raise Refused(err)
    assert r.returncode == 0, "matrix_stream: rc %d: %s" % (r.returncode, err)
    assert out.count("every byte equal") == 3, out


def cell_py_stream(v, tier):
    """windows 2 (gpunvme.stream's default) and 4 (stream_decoder's), two
    passes each, every byte of every layer and resident tensor compared"""
    d = py_dev(tier)
    want = {n: t[2] for n, t in v.tensors.items()}
    for window in (2, 4):
        try:
            s = gpunvme.stream(v.uri, v.model, layers="model.layers.{i}.", window=window, no_fallback=True, **d)
        except gpunvme.Error as e:
            gpu_error(e)
        seen = dict.fromkeys(want, 0)
        try:
            assert s.tier == (0 if tier == "cpu" else d["tier"])
            for n, t in s.resident.items():
                assert raw(t) == want[n], "stream resident %s differs from the source" % n
                seen[n] += 2
            for _ in range(2):
                for i, layer in s:
                    for n, t in layer.items():
                        assert raw(t) == want[n], \
                            "window %d: stream layer %d: %s differs from the source" % (window, i, n)
                        seen[n] += 1
            # no fault is injected: reads repeated after a failure mean a stall
            # (right bytes, late), as NVMe/TCP's re-created queues once caused
            st = s.stats()
            assert st["window"] == min(window, st["layers"])
            assert st["retries"] == 0 and st["resets"] == 0, \
                "stream: %d reads repeated, %d resets, in a run without faults" % (st["retries"], st["resets"])
        finally:
            s.close()
        assert all(c == 2 for c in seen.values()), [n for n, c in seen.items() if c != 2][:5]


CELLS = {"cli cat": cell_cli_cat, "cli load --verify": cell_cli_load, "load_file": cell_load_file,
         "safe_open": cell_safe_open, "load_pretrained": cell_load_pretrained, "transformers": cell_transformers,
         "Volume.read": cell_volume_read,
         "C layer stream": cell_c_stream, "py stream": cell_py_stream}


# ---- the matrix ---------------------------------------------------------------------

def _run_cell(volumes, entry, volume, tier):
    """returns when the cell ran and passed; raises Refused, or the failure"""
    if volume == "QEMU vfio":
        # QEMU's NVMe controller through vfio exists only in the guest of
        # the QEMU suite: qemu.matrix_vfio runs this column there and prints
        # its table (tests/qemu/scenarios/matrix_vfio.sh)
        raise Refused("runs in the QEMU suite: " + QEMU_TEST)
    if tier != "cpu" and entry in CPU_ONLY:
        raise Refused("no tier: %s reads on the CPU" % entry)
    if entry == "transformers" and (TORCH is None or TRANSFORMERS is None):
        raise Refused("needs torch+transformers")
    if entry == "transformers" and volume in MD_FIXTURE:
        raise Refused("the md fixtures hold no transformers model")
    if tier != "cpu" and entry not in NATIVE:
        # without the CUDA backend the Python entry points refuse the GPU
        # tiers themselves (gpu_error)
        if gpunvme.HAVE_CUDA and not CUDA_PY:
            raise Refused(GPU_REASON)
        if CUDA_PY and TORCH is None:
            raise Refused("needs torch")
    CELLS[entry](volumes[volume], tier)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("volume", VOLUMES)
@pytest.mark.parametrize("entry", ENTRIES)
def test_cell(volumes, entry, volume, tier):
    want = expect(entry, volume, tier)
    key = (entry, volume, tier)
    try:
        _run_cell(volumes, entry, volume, tier)
    except Refused as r:
        reason = str(r)
        if want is None:
            MATRIX[key] = ("FAILED", "refused, expected to run: " + reason)
            pytest.fail("%s x %s x %s: expected to run, refused: %s" % (key + (reason,)))
        if not re.search(want, reason):
            MATRIX[key] = ("FAILED", "refused for another reason: %s (expected /%s/)" % (reason, want))
            pytest.fail("%s x %s x %s: refused with %r, expected a refusal matching /%s/" % (key + (reason, want)))
        reason = re.sub(r"^\[Errno \d+\] ", "", reason).split(": rebuild it")[0]
        MATRIX[key] = ("refused", reason if len(reason) < 110 else reason[:107] + "...")
        return
    except Exception as e:
        msg = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        if key in KNOWN_BUGS:
            MATRIX[key] = ("xfail", "%s (%s)" % (KNOWN_BUGS[key], msg))
            pytest.xfail("%s: %s" % (KNOWN_BUGS[key], msg))
        MATRIX[key] = ("FAILED", msg)
        raise
    except BaseException as e:
        MATRIX[key] = ("FAILED", "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        raise
    if key in KNOWN_BUGS:
        MATRIX[key] = ("FAILED", "XPASS: passes, remove it from KNOWN_BUGS: %s" % KNOWN_BUGS[key])
        pytest.fail("%s x %s x %s passes: remove it from KNOWN_BUGS" % key)
    if want is not None:
        MATRIX[key] = ("FAILED", "ran, expected a refusal matching /%s/" % want)
        pytest.fail("%s x %s x %s: ran, expected a refusal matching /%s/" % (key + (want,)))
    MATRIX[key] = ("passed", "")


def test_matrix_every_cell(request):
    """no silent cell: every cell of the table has a result (when the whole
    table was collected)"""
    cells = [i for i in request.session.items if i.originalname == "test_cell" and i.module.__name__ == __name__]
    if len(cells) != len(ENTRIES) * len(VOLUMES) * len(TIERS):
        pytest.skip("part of the matrix was selected")
    missing = [(e, v, t) for e in ENTRIES for v in VOLUMES for t in TIERS if (e, v, t) not in MATRIX]
    assert not missing, "cells without a result: %s" % missing[:5]
    assert not [k for k, r in MATRIX.items() if r[0] == "FAILED"]


# ---- several devices on every kind of volume ---------------------------------------------------

def _same_split(shards, infos, want, what):
    """placement "split": each tensor's rows over the devices in order, or
    the whole tensor on every device when it is too small to split"""
    for info in infos:
        parts = [raw(s[info.name]) for s in shards]
        if gpunvme._split_rows(info, len(shards)) is None:
            assert parts == [want[info.name]] * len(shards), "%s: %s is not whole on every device" % (what, info.name)
        else:
            assert b"".join(parts) == want[info.name], "%s: %s's rows differ from the source" % (what, info.name)


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("volume", [v for v in VOLUMES if v != "QEMU vfio"])
def test_several_devices(volumes, volume, tier):
    """device=[...] with every placement, one volume and replicas (a volume
    per device), the model file and the Hugging Face directory, every byte
    compared. The CPU tier: CPU-tier loaders standing in for two GPUs, one
    queue pair of 2 entries each (few free slots), loaded together. Tiers 1
    and 2: two GPUs through the public API (the GPU machine)."""
    v = volumes[volume]
    cases = [(v.model, {n: t[2] for n, t in v.tensors.items()}), (v.pretrained, v.pretrained_data)]
    if tier == "cpu":
        devs = [(0, 0, "cpu0"), (0, 0, "cpu1")]
        with gpunvme.Volume(v.uri) as a, gpunvme.Volume(v.uri) as b:
            for path, want in cases:
                ma, mb = a.open_model(path), b.open_model(path)
                sel = list(gpunvme._index(ma).values())
                for models, kind in ((ma, "one volume"), ([ma, mb], "replicas")):
                    what = "%s, %s, %s" % (volume, path, kind)
                    for placement in ("layers", "size"):
                        sd = gpunvme._load_multi(models, sel, devs, placement, 0, "np", False, "m", 1, 2)
                        same_dict(dict(sd), want, "%s, %s" % (what, placement), ordered=False)
                    shards = gpunvme._load_multi(models, sel, devs, "split", 0, "np", False, "m", 1, 2)
                    _same_split(shards, sel, want, what + ", split")
        return
    if not CUDA_PY or TORCH is None or gpunvme._gpunvme.cuda_device_count() < 2:
        pytest.skip("needs two CUDA GPUs and torch (the GPU machine)")
    t = 1 if tier == "tier1" else 2
    devices = ["cuda:0", "cuda:1"]
    for path, want in cases:
        for uri, kind in ((v.uri, "one volume"), ([v.uri, v.uri], "replicas")):
            what = "%s, %s, %s, %s" % (volume, path, kind, tier)
            try:
                sd = gpunvme.load_pretrained(uri, path, device=devices, tier=t, placement="layers")
            except gpunvme.Error as e:
                want_refusal = expect("load_pretrained", volume, tier)
                assert want_refusal and re.search(want_refusal, str(e)), "%s: %s" % (what, e)
                return
            same_dict(dict(sd), want, what + ", layers", ordered=False)
            shards = gpunvme.load_pretrained(uri, path, device=devices, tier=t, placement="split")
            with gpunvme.Volume(v.uri) as a:
                _same_split(shards, list(gpunvme._index(a.open_model(path)).values()), want, what + ", split")


_PROFILE_CHILD = """
import hashlib, json, sys
import numpy as np
import gpunvme
uri, path, tier = sys.argv[1:4]
kw = dict(device="cpu", framework="numpy") if tier == "cpu" else dict(device="cuda", tier=int(tier[-1]))
sd = gpunvme.load_file(uri, path, **kw)
out = {}
for n, t in sd.items():
    if tier != "cpu":
        t = t.detach().contiguous().cpu().reshape(-1).view(__import__("torch").uint8).numpy()
    out[n] = hashlib.sha256(np.ascontiguousarray(t).view(np.uint8).tobytes()).hexdigest()
print(json.dumps(out))
"""


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("volume", [v for v in VOLUMES if v != "QEMU vfio"])
def test_load_profile(volumes, volume, tier):
    """GPUNVME_LOAD_PROFILE=1 on every kind of volume and tier: the load is
    the same (every tensor's bytes, by digest, from a child process: the
    switch is read once per process) and one line says where the host's
    time went"""
    v = volumes[volume]
    if tier != "cpu" and not (CUDA_PY and TORCH is not None):
        pytest.skip("needs a CUDA GPU and torch (the GPU machine)")
    env = dict(os.environ, GPUNVME_LOAD_PROFILE="1")
    p = subprocess.run([sys.executable, "-c", _PROFILE_CHILD, v.uri, v.model, tier], env=env, capture_output=True,
                       text=True, timeout=300)
    if p.returncode and tier != "cpu":
        want_refusal = expect("load_file", volume, tier)
        assert want_refusal and re.search(want_refusal, p.stderr), "%s, %s: %s" % (volume, tier, p.stderr[-600:])
        return
    assert p.returncode == 0, "%s, %s: %s" % (volume, tier, p.stderr[-600:])
    got = json.loads(p.stdout.splitlines()[-1])
    want = {n: hashlib.sha256(t[2]).hexdigest() for n, t in v.tensors.items()}
    assert got == want, "%s, %s: the tensors differ" % (volume, tier)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("gpunvme load profile: ")]
    assert len(lines) == 1 and "%s, tier " % v.model in lines[0] and "queueing " in lines[0], p.stderr[-600:]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("volume", [v for v in VOLUMES if v != "QEMU vfio"])
def test_parked_loader(volumes, volume, tier):
    """one Volume's loads one after another, each result dropped before the
    next: the second takes over the loader the first left parked (the same
    one is parked again after it) and every byte is right, on every kind of
    volume and tier"""
    import gc
    v = volumes[volume]
    if tier != "cpu" and not (CUDA_PY and TORCH is not None):
        pytest.skip("needs a CUDA GPU and torch (the GPU machine)")
    want = {n: t[2] for n, t in v.tensors.items()}
    with gpunvme.Volume(v.uri) as vol:
        serial = None
        for k in range(2):
            try:
                sd = gpunvme.load_file(vol, v.model, **py_dev(tier))
            except gpunvme.Error as e:
                refusal = expect("load_file", volume, tier)
                assert tier != "cpu" and refusal and re.search(refusal, str(e)), "%s, %s: %s" % (volume, tier, e)
                return
            same_dict(sd, want, "load_file %d" % k)
            assert vol._parked is None, "%s, %s: parked while its Loader lives" % (volume, tier)
            del sd
            gc.collect()
            parked = vol._parked
            assert parked is not None, "%s, %s: nothing parked after load %d" % (volume, tier, k)
            assert serial in (None, parked[4]), "%s, %s: load 2 made a loader of its own" % (volume, tier)
            serial = parked[4]
        assert vol._parked is not None
    assert vol._parked is None
