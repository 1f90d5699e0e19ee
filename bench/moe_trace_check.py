#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Issue 33's acceptance 4: read a profiler trace of one decode step of
moe_bench's row (a) (torch.profiler's Chrome trace) and show that no host
wait sits between a layer's router and its expert reads.

For every MoE layer of the step: the router's top-k (aten::topk on the host
thread), then the launch of the expert cache's decide kernel (mg_decide, the
first of the three a fetch queues). Between the two, on the host thread, a
host wait would be a call that blocks on the GPU: cudaStreamSynchronize,
cudaDeviceSynchronize, cudaEventSynchronize, a synchronous cudaMemcpy, or
torch's aten::item / aten::_local_scalar_dense (a value copied to the host).
Prints one line per layer and the step's blocking calls elsewhere (with the
torch op they sit in); exit status 1 if a layer has a host wait, 2 if the
trace holds no router/fetch pair.

  python3 bench/moe_trace_check.py trace-mixtral-ssd.json[.gz]
"""
import gzip
import json
import sys

BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
            "aten::item", "aten::_local_scalar_dense")


def main(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        d = json.load(f)
    ev = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]
    host = [e for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")]
    host.sort(key=lambda e: e["ts"])
    # the kernels' launches: a kernel and its launch share a correlation id
    by_corr = {e["args"]["correlation"]: e for e in host
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    decides = sorted((by_corr[k["args"]["correlation"]] for k in ev
                      if k.get("cat") == "kernel" and k["name"].startswith("mg_decide")
                      and k.get("args", {}).get("correlation") in by_corr), key=lambda e: e["ts"])
    routers = [e for e in host if e["name"] == "aten::topk"]
    if not decides or not routers:
        print("%s: no router (aten::topk) or no fetch (mg_decide) in the trace" % path)
        return 2
    ops = [e for e in host if e.get("cat") == "cpu_op"]

    def inside(t):
        c = [e for e in ops if e["ts"] <= t["ts"] <= e["ts"] + e.get("dur", 0)]
        return c[0]["name"] if c else "-"

    bad = 0
    for i, launch in enumerate(decides):
        before = [r for r in routers if r["ts"] < launch["ts"]]
        if not before:
            continue
        r = before[-1]
        waits = [e for e in host if r["ts"] <= e["ts"] <= launch["ts"] and e["name"] in BLOCKING]
        bad += bool(waits)
        print("layer %2d: router -> fetch queued in %7.1f us on the host, %s" % (
            i, launch["ts"] - r["ts"], "host waits: " + ", ".join(e["name"] for e in waits) if waits else
            "no host wait"))
    other = [e for e in host if e["name"] in BLOCKING]
    print("blocking calls in the whole step: %d" % len(other))
    for e in other:
        print("  %.1f us after the step's start: %s (%.1f us) in %s" % (e["ts"] - host[0]["ts"], e["name"],
                                                                     e.get("dur", 0), inside(e)))
    gpu = [e for e in ev if e.get("cat") == "kernel"]
    if gpu:
        print("host thread done queuing at %.1f ms; GPU work ends at %.1f ms" % (
            (max(e["ts"] for e in decides) - host[0]["ts"]) / 1e3,
            (max(e["ts"] + e.get("dur", 0) for e in gpu) - host[0]["ts"]) / 1e3))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: moe_trace_check.py TRACE.json")
    sys.exit(main(sys.argv[1]))
