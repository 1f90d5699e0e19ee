#!/bin/bash
# call 6 (session 22): main (116d374) + stream_decoder window=4 by default: the default against window 2, one round (device budget)

export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
echo "tree: main $(cat abx/rev) + sampler"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh 2>&1 | tail -3
A=(40 8 1.6)
E="nsq=64&mqes=1023"
sum() { python3 - "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "per_step_s" in d and "stats" in d:
        s = d["per_step_s"]; dec = s[1:]
        print("  window %s: decode steps %s ms, mean %.1f ms = %.1f %% of the floor (695.1 ms); logits equal %s; under budget %s, peak %.0f MB"
              % (d["window"], [round(x * 1e3, 1) for x in dec], 1e3 * sum(dec) / len(dec), 100 * 0.6951029 / (sum(dec) / len(dec)),
                 d["logits_bitwise_equal_every_token"], d["under_budget"], d["peak_total_bytes"] / 1e6))
PY
}
n=0
for w in default 2; do
	n=$((n + 1))
	if [ $n = 1 ]; then st="model run"; m=ref,ssd; else st=run; m=ssd; fi
	mkdir -p $R/r$n
	GPUNVME_STREAM_TRACE=$R/r$n/trace.txt WINDOW=${w#default} OUT=$R/r$n STEPS="$st" METHODS=$m EMUQ=$E timeout 200 bash bench/stream_llm_run.sh "${A[@]}" >/dev/null 2>&1
	echo "run $n window $w rc=$?"
	sum $R/r$n/results.jsonl
	python3 bench/stream_trace.py $R/r$n/trace.txt --layers 40 2>&1 | head -10
done
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
