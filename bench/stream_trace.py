#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""A layer stream's trace (GPUNVME_STREAM_TRACE, include/gpunvme/stream.h)
cut into steps: a step starts at each acquire of layer 0. Per step: its
length, the reads' busy time and their idle gaps on the reads' stream, the
consumer's waits for reads (all, and at layers 0 and 1), and the host time
between the previous step's last release and this step's first acquire (the
model's work outside the layers: sampling, the next step's set-up), and
the host's hold of layer 0 (its acquire to its release). What
the first decode step pays beyond the steady state shows as the row that
differs.

  python3 bench/stream_trace.py trace.txt [--layers N]
"""
import argparse
import sys


def parse(path):
    ev = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) != 5 or w[0] not in ("gpu", "host"):
                continue
            try:
                ev.append((w[0] + " " + w[1], int(w[2]), float(w[3]), float(w[4])))
            except ValueError:
                continue
    return ev


def busy(intervals, lo, hi):
    """union length of intervals clipped to [lo, hi), and the idle gaps in it"""
    iv = sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi)
    total = idle = 0.0
    cur_s = cur_e = None
    for s, e in iv:
        if cur_e is None:
            cur_s, cur_e = s, e
            idle += s - lo
        elif s > cur_e:
            total += cur_e - cur_s
            idle += s - cur_e
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
        idle += hi - cur_e
    else:
        idle = hi - lo
    return total, idle


def steps(ev, nlayers=None):
    starts = [s for k, l, s, e in ev if k == "host acquire" and l == 0]
    if not starts:
        return []
    last = nlayers - 1 if nlayers else max(l for k, l, s, e in ev if k == "host acquire")
    rel_last = [e for k, l, s, e in ev if k == "host release" and l == last]
    reads = [(s, e) for k, l, s, e in ev if k == "gpu read"]
    end_all = max(e for k, l, s, e in ev)
    out = []
    for n, t0 in enumerate(starts):
        t1 = starts[n + 1] if n + 1 < len(starts) else end_all
        waits = [(l, e - s) for k, l, s, e in ev if k == "gpu wait" and t0 <= s < t1]
        rel0 = [s for k, l, s, e in ev if k == "host release" and l == 0 and t0 <= s < t1]
        prev_rel = [r for r in rel_last if r <= t0]
        rbusy, ridle = busy(reads, t0, t1)
        out.append({
            "step": n,
            "ms": round(t1 - t0, 2),
            "reads_busy_ms": round(rbusy, 2),
            "reads_idle_ms": round(ridle, 2),
            "wait_ms": round(sum(d for _, d in waits), 2),
            "wait_l0_ms": round(sum(d for l, d in waits if l == 0), 2),
            "wait_l1_ms": round(sum(d for l, d in waits if l == 1), 2),
            "host_gap_ms": round(t0 - prev_rel[-1], 2) if prev_rel else None,
            # the host's hold of layer 0 (acquire to release): the step's
            # serial stretch, which the reads cover only window - 1 layers
            # deep (bench/results/emu-2026-11-29-s22)
            "hold_l0_ms": round(rel0[0] - t0, 2) if rel0 else None,
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--layers", type=int, default=None, help="layers per step (default: the highest acquired + 1)")
    a = ap.parse_args()
    ev = parse(a.trace)
    if not ev:
        print("%s: no trace lines" % a.trace, file=sys.stderr)
        return 1
    rows = steps(ev, a.layers)
    if not rows:
        print("%s: no acquire of layer 0" % a.trace, file=sys.stderr)
        return 1
    keys = list(rows[0])
    print(" ".join("%14s" % k for k in keys))
    for r in rows:
        print(" ".join("%14s" % ("-" if r[k] is None else r[k]) for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
