#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The host's half of qemu.matrix_vfio (scenarios/matrix_vfio.sh): the
combination matrix's "QEMU vfio" column as the guest ran it
(matrix_guest.sh's "QEMU-DATA matrix | ENTRY | TIER | OUTCOME | DETAIL"
lines in the serial log).

  matrix_table.py SERIAL_LOG SOURCE_MODEL

Checks that every entry point of the matrix (ENTRIES of
python/tests/test_matrix.py, read from that file) x {cpu, tier1, tier2} has
exactly one line, that the refusals give the reasons expected (the same
rules as test_matrix.py's expect() for a machine without GPU and without
Python), that the sha256 of every tensor `gpunvme load --json` printed in the
guest equals the source file's, and prints the table. Exit status 1 when a
cell failed, is missing, or a refusal's reason is not the expected one.
"""
import ast
import hashlib
import json
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIERS = ["cpu", "tier1", "tier2"]
CPU_ONLY = {"cli cat", "Volume.read"}
NATIVE = {"cli cat", "cli load --verify", "C layer stream"}


def matrix_const(name):
    """a constant of test_matrix.py (read, not imported: no gpunvme here)"""
    tree = ast.parse((ROOT / "python" / "tests" / "test_matrix.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("matrix_table: no %s in python/tests/test_matrix.py" % name)


def expect(entry, tier):
    """None: the cell must run; else a regular expression for the reason"""
    if tier != "cpu" and entry in CPU_ONLY:
        return "no tier: %s reads on the CPU" % entry
    if entry not in NATIVE:
        return "no Python in the guest"
    if tier == "cpu":
        return None
    # the programs' own refusals: the CLI's tier policy (tier.h: Tier 1
    # needs a GPU, Tier 2 a controller that can DMA into GPU memory),
    # matrix_stream built without CUDA
    if entry == "cli load --verify":
        return "needs a CUDA GPU" if tier == "tier1" else "DMA into GPU memory"
    return "REFUSED: built without CUDA"


def source_sha256(path):
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    base = 8 + n
    return {k: hashlib.sha256(b[base + v["data_offsets"][0]:base + v["data_offsets"][1]]).hexdigest()
            for k, v in hdr.items() if k != "__metadata__"}


def main():
    log = Path(sys.argv[1]).read_text(errors="replace").replace("\r", "").splitlines()
    cells = {}
    problems = []
    for line in log:
        if not line.startswith("QEMU-DATA matrix |"):
            continue
        f = [x.strip() for x in line.split("|")]
        if len(f) < 5:
            problems.append("bad line: %s" % line)
            continue
        key = (f[1], f[2])
        if key in cells:
            problems.append("two lines for %s %s" % key)
        cells[key] = [f[3], "|".join(f[4:])]

    # the load --json the guest printed: every tensor's sha256 against the source
    try:
        a = log.index("MATRIX-LOAD-JSON-BEGIN")
        b = log.index("MATRIX-LOAD-JSON-END", a)
        j = json.loads("\n".join(log[a + 1:b]))
        got = {t["name"]: t["sha256"] for t in j["tensors"]}
    except (ValueError, KeyError) as e:
        got = None
        err = "no load --json in the log (%s)" % e
    want = source_sha256(sys.argv[2])
    c = cells.get(("cli load --verify", "cpu"))
    if c and c[0] == "ran":
        if got is None:
            c[:] = ["failed", err]
        elif got != want:
            bad = sorted(n for n in set(want) | set(got) if got.get(n) != want.get(n))
            c[:] = ["failed", "tensor sha256 differ from the source: %s" % bad[:5]]
        else:
            c[1] = "%d tensors, sha256 of each equal to the source's (host); verified against the CPU path" % len(want)

    entries = matrix_const("ENTRIES")
    # test_matrix.py's QEMU vfio cells point here
    if matrix_const("QEMU_TEST") != "qemu.matrix_vfio":
        problems.append("test_matrix.py's QEMU_TEST is %r, not qemu.matrix_vfio" % matrix_const("QEMU_TEST"))
    for e in entries:
        for t in TIERS:
            c = cells.get((e, t))
            if c is None:
                cells[(e, t)] = c = ["failed", "no result from the guest"]
            x = expect(e, t)
            if c[0] == "ran" and x is not None:
                c[:] = ["failed", "ran where a refusal (%s) was expected" % x]
            elif c[0] == "refused" and (x is None or not re.search(x, c[1])):
                c[:] = ["failed", "refused (%s) where %s" % (c[1], "it must run" if x is None else
                                                             "the reason must match %r" % x)]
    for k in cells:
        if k[0] not in entries or k[1] not in TIERS:
            problems.append("a line for a cell the matrix does not have: %s %s" % k)

    w = max(len(e) for e in entries)
    print("the combination matrix, volume QEMU vfio (qemu.matrix_vfio):")
    print("%-*s  %-5s  %-7s  %s" % (w, "entry", "tier", "outcome", "detail"))
    n = {"ran": 0, "refused": 0, "failed": 0}
    for e in entries:
        for t in TIERS:
            o, d = cells[(e, t)]
            n[o] = n.get(o, 0) + 1
            print("%-*s  %-5s  %-7s  %s" % (w, e, t, o, d))
    print("%d cells: %d ran, %d refused with a checked reason, %d failed" %
          (len(entries) * len(TIERS), n["ran"], n["refused"], n["failed"]))
    for p in problems:
        print("FAIL: " + p)
    return 1 if n["failed"] or problems else 0


if __name__ == "__main__":
    sys.exit(main())
