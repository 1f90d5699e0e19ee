#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 31, acceptance 4: no performance regression from the seams (the
# volume, the tier policy, the transport interface, the emulator's copy
# engine moved to src/emu_cuda). Old and new tree in one run on the GPU
# machine, alternating, ROUNDS rounds:
#   qd1      bench_gpu_qd1 on a modeled SSD (GPU-initiated 4 KiB reads, QD1)
#   iops     bench_gpu_iops, 12 workers x 48 queues, warp mode and thread mode
#   tier2    bench_gpu_bw -m emu: 8 GiB into GPU memory from a RAM namespace
#            (Tier 2 through the emulator's copy engine), 2 MiB chunks
#   py       gpunvme.load_pretrained(device="cuda") of a PY_SIZE (2G)
#            safetensors model in an ext4 image, each tree's own extension
#            (pip --target)
#   st       the baseline beside py: safetensors.torch.load_file(device=
#            "cuda") of the same file, page-cached (st_load.py; tree-free)
#   cli      `gpunvme load emu:IMG /m --tier 2` of that model: the load's
#            own figure and the command's wall time, start to exit
# Also used for issue 32 (the emulator's pinned staging for image files):
#   git archive -o seams-old.tar b23ff2b; ROWS="py st cli tier2" PY_SIZE=8G
# The old tree comes from a tarball made here (the device copy has no git):
#   git archive -o seams-old.tar 6bdbabb     (before issue 31's work)
#   run: carry nothing extra (seams-old.tar is an untracked file), then
#   OUT=DIR OLD_TAR=seams-old.tar bash bench/seams_ab.sh
# Prediction: within noise everywhere (one indirect call per submission and
# per poll on the CPU path, none on the GPU path; the copy engine's code is
# unchanged, only where it lives).
set -u
R=${OUT:?set OUT}/seams
mkdir -p "$R"
exec > >(tee "$R/run.log") 2>&1
OLD_TAR=${OLD_TAR:-seams-old.tar}
ROUNDS=${ROUNDS:-3}
ROWS=${ROWS:-qd1 iops tier2 py}  # a subset reruns only those rows
has() { [[ " $ROWS " == *" $1 "* ]]; }
echo "new: this tree; old: $OLD_TAR"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
O=/tmp/seams-old
rm -rf "$O" && mkdir -p "$O" && tar xf "$OLD_TAR" -C "$O" || { echo "no old tree: $OLD_TAR"; exit 1; }
T="bench_gpu_qd1 bench_gpu_iops bench_gpu_bw gpunvme-cli gpunvme-mkmodel"
b() {
	cmake -S "$1" -B "$1/bd" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$R/cmake-$2.log" 2>&1 &&
		cmake --build "$1/bd" -j8 --target $T >"$R/build-$2.log" 2>&1 || { echo "BUILD $2 FAILED"; tail -20 "$R/build-$2.log"; }
}
b . new & p1=$!
b "$O" old & p2=$!
wait $p1 $p2
export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
for v in new old; do
	has py || continue
	src=./python
	[ $v = old ] && src=$O/python
	python3 -m pip install -q --no-deps --no-build-isolation --target "/tmp/py-$v" "$src" >"$R/pip-$v.log" 2>&1 ||
		{ echo "PIP $v FAILED"; tail -20 "$R/pip-$v.log"; }
done
# the model for the Python row: 2 GiB, one file, ext4 image
W=$(mktemp -d /tmp/seams.XXXXXX)
mkdir -p "$W/tree/m"
PY_SIZE=${PY_SIZE:-2G}
Q=${EMU_OPTS:-} # emulator options for the py and cli rows, e.g. "?workers=8"
if has py || has st || has cli; then
	mb=$(numfmt --from=iec "$PY_SIZE")
	bd/bin/gpunvme-mkmodel --format safetensors --size "$PY_SIZE" --seed 7 -o "$W/tree/m/model.safetensors" >/dev/null &&
		truncate -s $((mb / 1048576 * 13 / 10 + 64))M "$W/fs.img" && mkfs.ext4 -q -F -d "$W/tree" "$W/fs.img" ||
		echo "model image FAILED"
fi
cat >"$W/py.py" <<'EOF'
import sys, time, torch, gpunvme
uri = sys.argv[1]
torch.cuda.init()
t = time.perf_counter()
sd = gpunvme.load_pretrained(uri, "/m", device="cuda")
torch.cuda.synchronize()
dt = time.perf_counter() - t
n = sum(v.numel() * v.element_size() for v in sd.values())
print("load_pretrained %.0f MB in %.3f s: %.2f GB/s" % (n / 1e6, dt, n / dt / 1e9))
EOF
M="latency_us=80&read_mbps=7000&iops=1000000&mdts=8"
for i in $(seq "$ROUNDS"); do
	for v in old new; do
		B=bd/bin
		[ $v = old ] && B=$O/bd/bin
		has qd1 && echo "$v qd1 $(timeout 120 $B/bench_gpu_qd1 -n 2000 -u "$M" 2>&1 | grep 'lib gpunvme_dev_rw')"
		has iops && echo "$v iops-warp $(timeout 60 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -n 32 -m 1 2>&1 | tail -1)"
		has iops && echo "$v iops-thread $(timeout 60 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -n 16 -m 0 2>&1 | tail -1)"
		# method,chunk,workers,queues,bytes,s,GB/s,verified,reps,best GB/s,note
		has tier2 && echo "$v tier2 $(timeout 120 $B/bench_gpu_bw -m emu -s 8589934592 -c 2M -w 8 -Q 1 -r 3 2>"$R/tier2-$v-$i.err" | grep '^gpunvme,' | tail -1)"
		has py && echo "$v py $(cd /tmp && PYTHONPATH=/tmp/py-$v timeout 120 python3 "$W/py.py" "emu:$W/fs.img$Q" 2>&1 | tail -1)"
		if has cli; then
			t0=$(date +%s%N)
			l=$(timeout 120 $B/gpunvme load "emu:$W/fs.img$Q" /m/model.safetensors --tier 2 2>&1 | tail -1)
			echo "$v cli wall $(( ($(date +%s%N) - t0) / 1000000 )) ms: $l"
		fi
	done
	has st && echo "base st $(timeout 120 python3 bench/st_load.py "$W/tree/m/model.safetensors" 2>&1 | tail -1)"
done | tee "$R/ab.txt"
rm -rf "$W"
date -u
