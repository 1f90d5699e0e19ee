#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 32: several trees' Python packages side by side in one GPU call. Each
# tree is built with pip into /tmp/pk_<tree> (kept on a warm machine) and run
# with PYTHONPATH, so no tree is installed over another:
#   next  this working tree
#   NAME  abx/NAME/, a `git archive REV | tar -x -C abx/NAME` export left
#         untracked (not ignored) in the working tree so that it travels with
#         it; drop its bench/results and docs to keep the copy small
# On the pyload checkpoint (an ext4 image of a save_pretrained model of PY_GIB,
# made once per machine under /tmp/pyload), in this order:
#   MULTI="next NAME"   bench/multi_gpu.py per tree (two GPUs), MREP runs a row
#   PYT=tests/...       pytest of this tree's package
#   CASE_TREES="next NAME" CASES="modeled load_file,plain load_file,..."
#                       bench/py_case.py, one process per case and tree
#   OUT=/dir TREES="next main" ... bash bench/py_trees_ab.sh
R=${OUT:?set OUT}
mkdir -p "$R"
exec > >(tee -a "$R/ab.log") 2>&1
log() { echo "[$(date -u +%T)] $*"; }
PW=/tmp/pyload
if [ ! -f $PW/ext4.img ]; then
	log "image (${PY_GIB:-8.5} GiB checkpoint)"
	mkdir -p $PW/root
	python3 bench/hf_models.py make $PW/root --big-gib "${PY_GIB:-8.5}" 2>"$R/make.err" | tail -1
	SZ=$(du -sb $PW/root | cut -f1)
	truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
	mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img || { echo "mkfs failed"; rm -f $PW/ext4.img; exit 1; }
fi
cat $PW/ext4.img >/dev/null
log builds
export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
pids=()
for t in ${TREES:-next}; do
	src=abx/$t/python
	[ "$t" = next ] && src=python
	[ -d "/tmp/pk_$t/gpunvme" ] && continue
	(python3 -m pip install -q --no-build-isolation --no-deps --target "/tmp/pk_$t" "./$src" >"$R/pip-$t.log" 2>&1 ||
		echo "PIP $t FAILED") &
	pids+=($!)
done
# not a bare wait: that would wait for the tee above too (and never end)
[ ${#pids[@]} = 0 ] || wait "${pids[@]}"
log built
for t in $MULTI; do
	log "multi_gpu.py with $t"
	PYTHONPATH=/tmp/pk_$t timeout "${MULTI_S:-300}" python3 bench/multi_gpu.py emu:$PW/ext4.img /big $PW/root/big \
		--repeat "${MREP:-3}" 2>"$R/multi2-$t.err" | tee "$R/multi2-$t.jsonl" | cut -c1-250
done
if [ -n "$PYT" ]; then
	log "pytest $PYT"
	# shellcheck disable=SC2086 # PYT: several test paths
	(cd python && PYTHONPATH=/tmp/pk_next timeout 200 python3 -m pytest -q -rs $PYT >"$R/pytest.log" 2>&1)
	echo "pytest rc=$?: $(tail -n 1 "$R/pytest.log")"
	grep -E "^(FAILED|ERROR)" "$R/pytest.log" | head
fi
IFS=, read -ra cases <<<"${CASES:-modeled load_file,plain load_file,modeled load_pretrained}"
for t in ${CASE_TREES:-}; do
	for c in "${cases[@]}"; do
		# shellcheck disable=SC2086 # a case is two words
		PYTHONPATH=/tmp/pk_$t timeout 90 python3 bench/py_case.py $PW/ext4.img /big $c 2>"$R/$t-${c// /-}.err" |
			sed "s/^/$t /" | cut -c1-300
	done
done
log end
