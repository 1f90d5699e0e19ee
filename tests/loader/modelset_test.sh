#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# `gpunvme load` on models that span several files, as other tools write
# them (tests/loader/mkset.py: safetensors and GGUF written from their
# specifications, Hugging Face shards + index as save_pretrained lays them
# out, llama.cpp gguf-split shards), in ext4 images built with mkfs.ext4 -d:
#   modelset_test.sh GPUNVME_BINARY GROUP
# Groups:
#   sets  a sharded HF directory (by directory and by index file), a
#         single-file HF directory, a split GGUF (by its first and by a middle
#         shard), the Hugging Face hub cache (symlinks into blobs/): every
#         tensor of every file, each sha256 equal to the source
#         bytes', --verify against the CPU path, --tensors across shards
#   bad   incomplete or inconsistent sets: each refused with exit 1 and one
#         line naming the file and the fix, never success for part of a model
# Exit 0 pass, 1 fail, 77 skip (no python3 or mkfs.ext4).
set -u

BIN=${1:?usage: modelset_test.sh GPUNVME_BINARY GROUP [MKMODEL_BINARY]}
GROUP=${2:?usage: modelset_test.sh GPUNVME_BINARY GROUP [MKMODEL_BINARY]}
MKMODEL=${3:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=${LOAD_TEST_TIMEOUT:-120}
TIER=${LOAD_TEST_TIER:-cpu}

skip() { echo "SKIP [$GROUP]: $*"; exit 77; }
command -v python3 >/dev/null 2>&1 || skip "no python3"
MKFS=$(command -v mkfs.ext4 || echo /sbin/mkfs.ext4)
[ -x "$MKFS" ] || skip "no mkfs.ext4 (e2fsprogs)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-set.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/stdout
ERR=$WORK/stderr
FAILS=0
CHECKS=0
FAIL_TAG=$GROUP
BAD_GREP=-E
. "$HERE/../harness/cli_checks.sh"

# layout NAME DIR: write it under $WORK/root/DIR; manifest in $WORK/NAME.man
layout() {
	python3 "$HERE/mkset.py" "$WORK/root/$2" "$1" >"$WORK/$1.man" || {
		fail "mkset.py $1 failed"
		return 1
	}
}

image() {
	"$MKFS" -q -F -b 4096 -d "$WORK/root" "$WORK/img" 64M >/dev/null 2>&1 || {
		fail "mkfs.ext4 -d failed"
		return 1
	}
	URI="emu:$WORK/img?lbads=12"
}

# check_json MANIFEST [GLOB]: stdout is one JSON object whose tensors are
# exactly the manifest's (or those matching GLOB), each with its sha256
PYCHECK='
import fnmatch, json, sys
out, man = sys.argv[1], sys.argv[2]
glob = sys.argv[3] if len(sys.argv) > 3 else ""
d = json.loads(open(out).read())
want = dict(l.rstrip("\n").split("\t") for l in open(man) if l.strip())
if glob:
    want = {k: v for k, v in want.items() if any(fnmatch.fnmatchcase(k, g) for g in glob.split(","))}
got = {t["name"]: t["sha256"] for t in d["tensors"]}
errs = []
if len(d["tensors"]) != len(got):
    errs.append("a tensor listed twice")
for k in sorted(set(want) | set(got)):
    if k not in got:
        errs.append("missing %s" % k)
    elif k not in want:
        errs.append("unexpected %s" % k)
    elif got[k] != want[k]:
        errs.append("%s: sha256 %s, source %s" % (k, got[k], want[k]))
if errs:
    print("; ".join(errs[:5])); sys.exit(1)
print("%d tensors, %d files, layout %s" % (len(got), d["files"], d["layout"]))
'

load_ok() { # load_ok MANIFEST PATH [extra args...]
	local man=$1 path=$2
	shift 2
	ok load "$URI" "$path" --json --tier "$TIER" "$@" || return 1
	local glob=""
	[ "${1:-}" = "--tensors" ] && glob=$2
	if ! python3 -c "$PYCHECK" "$OUT" "$man" $glob >"$WORK/pyout" 2>&1; then
		fail "load $path $*: $(head -c 400 "$WORK/pyout")"
		return 1
	fi
	echo "  ok: load $path $* ($(cat "$WORK/pyout"))"
}

case "$GROUP" in
sets)
	layout hf-sharded hf/llama-sharded &&
	layout hf-single hf/llama-single &&
	layout gguf-split gguf &&
	layout hf-cache hub &&
	{ [ -z "$MKMODEL" ] || { mkdir -p "$WORK/root/mk" && "$MKMODEL" --format gguf --size 3M --split 4 \
		--every-dtype -o "$WORK/root/mk/q" --manifest "$WORK/mk.tsv" >/dev/null; }; } &&
	image || exit 1
	load_ok "$WORK/hf-sharded.man" /hf/llama-sharded
	grep -q '"layout": "hf-index"' "$OUT" || fail "sharded directory: layout is not hf-index"
	grep -q '"files": 3' "$OUT" || fail "sharded directory: not 3 files"
	load_ok "$WORK/hf-sharded.man" /hf/llama-sharded/model.safetensors.index.json --verify
	load_ok "$WORK/hf-sharded.man" /hf/llama-sharded --tensors 'model.layers.0.*,model.layers.7.*' --verify
	load_ok "$WORK/hf-single.man" /hf/llama-single --verify
	grep -q '"layout": "hf-dir"' "$OUT" || fail "single-file directory: layout is not hf-dir"
	load_ok "$WORK/gguf-split.man" /gguf/model-00001-of-00003.gguf --verify
	grep -q '"layout": "gguf-split"' "$OUT" || fail "split GGUF: layout is not gguf-split"
	load_ok "$WORK/gguf-split.man" /gguf/model-00002-of-00003.gguf
	load_ok "$WORK/gguf-split.man" /gguf
	# gpunvme-mkmodel --split (the project's own gguf-split writer): every
	# tensor of its manifest, from any shard
	if [ -n "$MKMODEL" ]; then
		for sh in 1 4; do
			ok load "$URI" "/mk/q-0000$sh-of-00004.gguf" --json --verify || continue
			python3 - "$OUT" "$WORK/mk.tsv" <<'PYEOF' || fail "mkmodel --split 4, shard $sh: tensors differ from the manifest"
import json, sys
d = json.load(open(sys.argv[1]))
want = {l.split("\t")[0]: l.split("\t") for l in open(sys.argv[2]) if l.strip()}
got = {t["name"]: t for t in d["tensors"]}
assert d["files"] == 4 and d["layout"] == "gguf-split", (d["files"], d["layout"])
assert set(got) == set(want), sorted(set(got) ^ set(want))[:5]
for k, w in want.items():
    assert got[k]["dtype"] == w[1] and int(w[4]) == got[k]["bytes"], k
    assert int(w[3]) == got[k]["offset"], (k, w[3], got[k]["offset"])
PYEOF
			echo "  ok: mkmodel --split 4, load shard $sh: every tensor, offsets in its shard"
		done
	fi
	# queue pressure across shards: 2-entry queues (CAP.MQES 1), 8 KiB
	# commands (MDTS 2), one or three queue pairs of depth 2..5, so runs of
	# every file wait for slots with others outstanding; every tensor of every
	# shard hashed and --verify'ed
	base=$URI
	for v in "mqes=1&mdts=2&nsq=2|--queues 1 --depth 2" "mqes=3&mdts=2&nsq=4|--queues 3 --depth 4" \
		"mdts=3|--queues 3 --depth 5"; do
		URI="$base&${v%%|*}"
		# shellcheck disable=SC2086
		load_ok "$WORK/hf-sharded.man" /hf/llama-sharded --verify ${v#*|}
		# shellcheck disable=SC2086
		load_ok "$WORK/gguf-split.man" /gguf/model-00002-of-00003.gguf --verify ${v#*|}
	done
	URI=$base
	# the hub cache: relative links into blobs/, an absolute link to the snapshot
	load_ok "$WORK/hf-cache.man" /hub/models--org--tiny/snapshots/0123abcd --verify
	load_ok "$WORK/hf-cache.man" /hub/current/model.safetensors.index.json
	;;
bad)
	for l in bad-missing-shard bad-extra-in-map bad-missing-in-map bad-wrong-shard bad-dup bad-gguf-missing \
		bad-gguf-count bad-gguf-tcount bad-gguf-dup; do
		layout "$l" "$l" || exit 1
	done
	mkdir -p "$WORK/root/empty" "$WORK/root/pickle" "$WORK/root/two"
	printf 'not a pickle, but named like one' >"$WORK/root/pickle/pytorch_model.bin"
	python3 "$HERE/mkset.py" "$WORK/root/two" hf-single >/dev/null &&
		cp "$WORK/root/two/model.safetensors" "$WORK/root/two/a.safetensors" &&
		mv "$WORK/root/two/model.safetensors" "$WORK/root/two/b.safetensors"
	# a GGUF named as shard 1 of 3 without split metadata
	python3 -c '
import sys; sys.path.insert(0, sys.argv[1])
import mkset
mkset.write(sys.argv[2] + "/lone/model-00001-of-00003.gguf", mkset.gguf_bytes(mkset.gguf_tensors(3, 5), {}))
' "$HERE" "$WORK/root"
	mkdir -p "$WORK/root/idx"
	python3 "$HERE/mkset.py" "$WORK/root/idx/shards" hf-sharded >/dev/null
	idx() { printf '%s' "$2" >"$WORK/root/idx/$1.safetensors.index.json"; }
	idx notjson '{"weight_map": {"a": "shards/model-00001-of-00003.safetensors",}}'
	idx nomap '{"metadata": {"total_size": 4}}'
	idx emptymap '{"metadata": {}, "weight_map": {}}'
	idx mapnotobj '{"weight_map": ["shards/model-00001-of-00003.safetensors"]}'
	idx valnotstr '{"weight_map": {"model.layers.0.wq": 1}}'
	idx twomaps '{"weight_map": {}, "weight_map": {}}'
	idx emptyshard '{"weight_map": {"model.layers.0.wq": ""}}'
	idx notmodel '{"weight_map": {"x": "notmodel.safetensors.index.json"}}'
	image || exit 1
	bad 1 'bad JSON: .*(byte [0-9]+)' load "$URI" /idx/notjson.safetensors.index.json
	bad 1 'no "weight_map": not a Hugging Face safetensors index' load "$URI" /idx/nomap.safetensors.index.json
	bad 1 '"weight_map" is empty' load "$URI" /idx/emptymap.safetensors.index.json
	bad 1 '"weight_map" must be an object' load "$URI" /idx/mapnotobj.safetensors.index.json
	bad 1 'expected the shard.s file name' load "$URI" /idx/valnotstr.safetensors.index.json
	bad 1 'duplicate "weight_map"' load "$URI" /idx/twomaps.safetensors.index.json
	bad 1 'empty or NUL-bearing shard file name' load "$URI" /idx/emptyshard.safetensors.index.json
	bad 1 'not a safetensors or GGUF file' load "$URI" /idx/notmodel.safetensors.index.json
	bad 1 'holds 8 safetensors indexes' load "$URI" /idx
	bad 1 'shard .*model-00002-of-00003.safetensors.* is missing' load "$URI" /bad-missing-shard
	bad 1 'model.ghost.weight.*whose header does not have it' load "$URI" /bad-extra-in-map
	bad 1 'does not list' load "$URI" /bad-missing-in-map/model.safetensors.index.json
	bad 1 'puts tensor .* in model-00002-of-00003.safetensors, but it is in' load "$URI" /bad-wrong-shard
	bad 1 'puts tensor .* in model-00001-of-00003.safetensors, but it is in .*model-00002' load "$URI" /bad-dup
	bad 1 'shard 2 of 3 of the split GGUF .* is missing' load "$URI" /bad-gguf-missing/model-00001-of-00003.gguf
	bad 1 'shard 2 of 3 .* is missing' load "$URI" /bad-gguf-missing/model-00003-of-00003.gguf
	bad 1 'says it is shard 3 of 4.*expected 3 of 3' load "$URI" /bad-gguf-count/model-00001-of-00003.gguf
	bad 1 'hold 12 tensors, split.tensors.count says 99' load "$URI" /bad-gguf-tcount/model-00001-of-00003.gguf
	bad 1 'tensor "blk.0.w0" is in both .*model-00001-of-00003.gguf and .*model-00002-of-00003.gguf' load "$URI" /bad-gguf-dup
	bad 1 'named as shard 1 of 3 of a split GGUF but has no split.count' load "$URI" /lone/model-00001-of-00003.gguf
	bad 1 'no model in this directory' load "$URI" /empty
	bad 1 'only PyTorch pickle checkpoints.*safe_serialization=True' load "$URI" /pickle
	bad 1 'holds 2 .safetensors files .*name the file' load "$URI" /two
	bad 1 'No such file' load "$URI" /nowhere
	;;
*)
	echo "unknown group $GROUP" >&2
	exit 2
	;;
esac

echo "[$GROUP] $CHECKS checks, $FAILS failures"
[ "$FAILS" -eq 0 ]
