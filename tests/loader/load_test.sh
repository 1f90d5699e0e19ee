#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# `gpunvme load` on the fragmented ext4/XFS fixtures of tests/loader/fixtures
# (scripts/fixtures/make-model-fixtures.sh) and on images built at test time:
#   load_test.sh GPUNVME_BINARY GROUP [MKMODEL_BINARY]
# Groups: json_ext4 json_xfs tensors_glob verify tier_cpu bad_inputs usage queue_sweep pieces
# (fixtures), mkmodel (the generator alone), roundtrip (mkmodel + mkfs.ext4 -d
# / mkfs.xfs -p images of random-data models).
#
# Expected tensors come from the fixture manifest: name, dtype, shape, offset
# and bytes from gpunvme-mkmodel's own layout (cross-checked at fixture time
# by tests/loader/modelcheck.py, an independent reader), sha256 computed by
# coreutils from the source file. Every invocation runs under `timeout`;
# error cases check the exit code (1 runtime, 2 usage), that stderr is
# exactly one line starting with "gpunvme: " and a key phrase; a signal,
# a hang or a sanitizer report is always a failure.
# LOAD_TEST_TIER=1|2 runs the json_*, tensors_glob, verify and queue_sweep groups at that
# tier (GPU machines; default cpu). Exit 0 pass, 1 fail, 77 skip (no zstd /
# python3 / tool the group needs).
set -u # not -e: a failed check is counted and the group goes on

BIN=${1:?usage: load_test.sh GPUNVME_BINARY GROUP [MKMODEL_BINARY]}
GROUP=${2:?usage: load_test.sh GPUNVME_BINARY GROUP [MKMODEL_BINARY]}
MKMODEL=${3:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FX=$HERE/fixtures
T=${LOAD_TEST_TIMEOUT:-120}
TIER=${LOAD_TEST_TIER:-cpu}

skip() { echo "SKIP [$GROUP]: $*"; exit 77; }
command -v python3 >/dev/null 2>&1 || skip "no python3"
[ -x "$BIN" ] || { echo "FAIL: $BIN is not an executable (build the gpunvme-cli target)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-load.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/stdout
ERR=$WORK/stderr
FAILS=0
CHECKS=0

FAIL_TAG=$GROUP
BAD_GREP=-E
# fail, show, run_cmd, run, ok, bad
. "$HERE/../harness/cli_checks.sh"

# The JSON checker: stdout must be exactly one JSON object and describe the
# expected tensors of the manifest (all, or those matching the globs).
#   check_json MANIFEST PATH URI FS VERIFIED [GLOBS]     (tier: $CHECK_TIER)
PYCHECK='
import fnmatch, json, sys
out, tier, man, path, uri, fs, verified = sys.argv[1:8]
globs = sys.argv[8] if len(sys.argv) > 8 else ""
errs = []
try:
    d = json.loads(open(out, encoding="utf-8").read())
except ValueError as e:
    print("stdout is not one JSON object: %s" % e); sys.exit(1)
if not isinstance(d, dict):
    print("JSON is not an object"); sys.exit(1)
want = []
for line in open(man, encoding="utf-8"):
    f = line.rstrip("\n").split("\t")
    if f[0] != path:
        continue
    if globs and not any(fnmatch.fnmatchcase(f[1], g) for g in globs.split(",")):
        continue
    want.append({"name": f[1], "dtype": f[2], "shape": [int(x) for x in f[3].split(",") if x != ""],
                 "offset": int(f[4]), "bytes": int(f[5]), "sha256": f[6]})
if not want and not globs:
    print("internal: no manifest entries for %s" % path); sys.exit(1)
fmt = "gguf" if path.endswith(".gguf") else "safetensors"
def expect(key, value):
    if d.get(key) != value or type(d.get(key)) is not type(value):
        errs.append("%s: %r, expected %r" % (key, d.get(key), value))
expect("uri", uri); expect("path", path); expect("format", fmt); expect("fs", fs)
expect("tier", tier); expect("verified", verified == "true")
expect("bytes", sum(t["bytes"] for t in want))
for k in ("seconds", "gbps"):
    v = d.get(k)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        errs.append("%s: %r is not a number >= 0" % (k, v))
got = d.get("tensors")
if not isinstance(got, list):
    errs.append("tensors: not a list")
    got = []
gn, wn = [t.get("name") for t in got if isinstance(t, dict)], [t["name"] for t in want]
if gn != wn:
    extra = [n for n in gn if n not in set(wn)][:5]
    missing = [n for n in wn if n not in set(gn)][:5]
    errs.append("tensor names differ: %d reported, %d expected; unexpected %r, missing %r%s" %
                (len(gn), len(wn), extra, missing, "" if extra or missing else " (order differs)"))
else:
    for g, w in zip(got, want):
        for k in ("dtype", "shape", "offset", "bytes", "sha256"):
            if g.get(k) != w[k]:
                errs.append("%s: %s %r, expected %r" % (w["name"], k, g.get(k), w[k]))
for e in errs[:15]:
    print(e)
if len(errs) > 15:
    print("... %d problems in all" % len(errs))
sys.exit(1 if errs else 0)
'
check_json() {
	if ! python3 -c "$PYCHECK" "$OUT" "$CHECK_TIER" "$@" >"$WORK/check.txt" 2>&1; then
		fail "JSON of '$2' on $3 does not match the manifest${6:+ (tensors '$6')}:"
		sed 's/^/    /' "$WORK/check.txt" >&2
		return 1
	fi
	return 0
}

# ---- fixtures ---------------------------------------------------------------
MODEL_FILES=(/models/edge.safetensors /models/edge.gguf /models/small.safetensors /models/small.gguf)
# The bad inputs of the fixtures and what the message must say.
BAD_FILES=(
	"/bad/notmodel.bin|not a safetensors or GGUF"
	"/bad/empty.bin|empty|not a safetensors or GGUF"
	"/bad/truncated.safetensors|truncat"
	"/bad/garbage.safetensors|JSON|syntax|header"
	"/bad/pastend.safetensors|past the end|beyond|outside"
	"/bad/unknown_dtype.safetensors|unknown dtype"
	"/bad/truncated.gguf|truncat"
	"/bad/unknown_type.gguf|unknown (ggml )?type"
	"/bad/overlap.safetensors|overlap"
	"/bad/shape_mismatch.safetensors|shape|bytes|size"
	"/bad/huge_header.safetensors|past the end|too (big|large)|truncat"
	"/bad/misaligned.gguf|align"
	"/bad/huge_count.gguf|truncat|cannot fit|too many"
)

# fixture NAME: decompresses NAME.img and NAME.manifest into $WORK once;
# sets IMG and MAN
fixture() {
	command -v zstd >/dev/null 2>&1 || skip "no zstd"
	IMG=$WORK/$1.img
	MAN=$WORK/$1.manifest
	if [ ! -f "$IMG" ]; then
		zstd -dqf "$FX/$1.img.zst" -o "$IMG" || { fail "cannot decompress $FX/$1.img.zst"; exit 1; }
		zstd -dqf "$FX/$1.manifest.zst" -o "$MAN" || { fail "cannot decompress $FX/$1.manifest.zst"; exit 1; }
	fi
}

CHECK_TIER=cpu

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# every model file, every field of every tensor
json_group() { # NAME FS
	CHECK_TIER=$TIER
	fixture "$1"
	local p
	for p in "${MODEL_FILES[@]}"; do
		ok load "emu:$IMG" "$p" --json --tier "$TIER" --no-progress && check_json "$MAN" "$p" "emu:$IMG" "$2" false
	done
	# 4 KiB LBAs: every extent is whole LBAs, the edges of tensors are not
	ok load "emu:$IMG?lbads=12" /models/edge.safetensors --json --tier "$TIER" --no-progress &&
		check_json "$MAN" /models/edge.safetensors "emu:$IMG?lbads=12" "$2" false
	# more queues: same bytes
	ok load "emu:$IMG" /models/small.gguf --json --tier "$TIER" --queues 4 --no-progress &&
		check_json "$MAN" /models/small.gguf "emu:$IMG" "$2" false
}

group_json_ext4() { json_group ext4-4k ext4; }
group_json_xfs() { json_group xfs-4k xfs; }

group_tensors_glob() {
	local img fs spec p g
	CHECK_TIER=$TIER
	for spec in "ext4-4k ext4" "xfs-4k xfs"; do
		read -r img fs <<<"$spec"
		fixture "$img"
		for spec in \
			"/models/small.safetensors|model.layers.1.*" \
			"/models/small.safetensors|lm_head.weight,model.norm.weight" \
			"/models/small.safetensors|*.self_attn.?_proj.weight" \
			"/models/small.safetensors|[!m]*" \
			"/models/small.gguf|blk.0.*,token_embd*" \
			"/models/small.gguf|*_norm.weight" \
			"/models/edge.safetensors|edge.small.0[0-4]?,edge.empty*" \
			"/models/edge.safetensors|edge.caf*,edge.*quoted*,edge.scalar" \
			"/models/edge.gguf|edge.q?_k,edge.big"; do
			p=${spec%%|*} g=${spec#*|}
			ok load "emu:$IMG" "$p" --json --tier "$TIER" --no-progress --tensors "$g" &&
				check_json "$MAN" "$p" "emu:$IMG" "$fs" false "$g"
		done
	done
	# a pattern matching nothing: an empty load (exit 0, no tensors) or a
	# runtime error with a message; never a crash or a usage error
	run load "emu:$IMG" /models/small.gguf --json --tier "$TIER" --no-progress --tensors 'no.such.tensor*' || return
	case $RC in
	0) python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["tensors"] == [] and d["bytes"] == 0 else 1)' "$OUT" ||
		fail "--tensors matching nothing: exit 0 but tensors/bytes not empty" ;;
	1) [ "$(wc -l <"$ERR")" -eq 1 ] && grep -q '^gpunvme: load: ' "$ERR" || { fail "--tensors matching nothing: not one 'gpunvme: load:' line"; show; } ;;
	*) fail "--tensors matching nothing: exit $RC"; show ;;
	esac
}

group_verify() {
	local spec img fs p
	CHECK_TIER=$TIER
	for spec in "ext4-4k ext4" "xfs-4k xfs"; do
		read -r img fs <<<"$spec"
		fixture "$img"
		for p in "${MODEL_FILES[@]}"; do
			ok load "emu:$IMG" "$p" --json --tier "$TIER" --verify --no-progress &&
				check_json "$MAN" "$p" "emu:$IMG" "$fs" true
		done
		# with --tensors, and without --json (the summary table)
		ok load "emu:$IMG" /models/edge.gguf --json --tier "$TIER" --verify --no-progress --tensors 'edge.big,edge.small.1*' &&
			check_json "$MAN" /models/edge.gguf "emu:$IMG" "$fs" true 'edge.big,edge.small.1*'
		ok load "emu:$IMG" /models/small.safetensors --tier "$TIER" --verify --no-progress &&
			{ grep -qF 'model.layers.0.mlp.up_proj.weight' "$OUT" || { fail "--verify summary lacks a tensor"; show; }; }
	done
}

group_tier_cpu() {
	fixture ext4-4k
	local n
	# the summary table: every tensor name, and a totals line
	ok load "emu:$IMG" /models/small.safetensors --tier cpu --no-progress || return
	for n in $(awk -F'\t' '$1 == "/models/small.safetensors" { print $2 }' "$MAN"); do
		grep -qF -- "$n" "$OUT" || { fail "summary lacks tensor $n"; show; break; }
	done
	# the totals line: "N of M tensors, SIZE ..." (or a "total" line)
	grep -qiE '(^|[^0-9])77 of 77 tensors|total' "$OUT" || { fail "summary has no totals line"; show; }
	grep -q '^{' "$OUT" && fail "summary looks like JSON"
	ok load "emu:$IMG" /models/edge.gguf --tier cpu --no-progress --tensors 'edge.q*' || return
	grep -qF 'Q4_K' "$OUT" || { fail "summary lacks dtype Q4_K"; show; }
	grep -qF 'edge.big' "$OUT" && { fail "summary lists a tensor --tensors excluded"; show; }
	# no --tier: with no usable GPU it loads through the CPU path and says so
	if have_gpu; then
		echo "note: a GPU is present; the no-GPU fallback message is not checked"
	else
		ok load "emu:$IMG" /models/edge.safetensors --json --no-progress &&
			check_json "$MAN" /models/edge.safetensors "emu:$IMG" ext4 false
		grep -qi 'cpu' "$ERR" || { fail "no-GPU load does not say it uses the CPU path"; show; }
		# a notice, and reads as one (not like the error lines)
		grep -q '^gpunvme: load: note: ' "$ERR" || { fail "the no-GPU notice does not read as a note"; show; }
		[ "$(wc -l <"$ERR")" -le 2 ] || { fail "no-GPU load: more than a notice on stderr"; show; }
	fi
	# explicit namespace
	ok load "emu:$IMG" /models/small.gguf --nsid 1 --tier cpu --json --no-progress &&
		check_json "$MAN" /models/small.gguf "emu:$IMG" ext4 false
}

group_bad_inputs() {
	local spec img fs e p re
	command -v zstd >/dev/null 2>&1 || skip "no zstd"
	for spec in "ext4-4k ext4" "xfs-4k xfs"; do
		read -r img fs <<<"$spec"
		fixture "$img"
		for e in "${BAD_FILES[@]}"; do
			p=${e%%|*} re=${e#*|}
			bad 1 "$re" load "emu:$IMG" "$p" --tier cpu --no-progress
			bad 1 "$re" load "emu:$IMG" "$p" --tier cpu --no-progress --json
			[ -s "$OUT" ] && { fail "stdout not empty on error: $p"; show; }
		done
		bad 1 "No such file" load "emu:$IMG" /models/nonexistent.safetensors --tier cpu --no-progress
		bad 1 "No such file" load "emu:$IMG" /nodir/x.gguf --tier cpu --no-progress
		bad 1 "holds 2 .safetensors files .*name the file to load" load "emu:$IMG" /models --tier cpu --no-progress
		# a file of zeros from the filler: not a model
		bad 1 "not a safetensors or GGUF" load "emu:$IMG" /filler/f00000 --tier cpu --no-progress
		# a namespace the controller does not have
		bad 1 "namespace|nsid" load "emu:$IMG" /models/edge.gguf --nsid 7 --tier cpu --no-progress
	done
	# a namespace of random bytes, and one of zeros: no file system
	head -c 4M /dev/urandom >"$WORK/raw.img"
	bad 1 "file system" load "emu:$WORK/raw.img" /models/m.safetensors --tier cpu --no-progress
	truncate -s 4M "$WORK/zero.img"
	bad 1 "file system" load "emu:$WORK/zero.img" /m.gguf --tier cpu --json --no-progress
	# no such image file
	bad 1 "No such file|cannot open|not found" load "emu:$WORK/none.img" /m.gguf --tier cpu --no-progress
}

group_usage() {
	fixture ext4-4k
	local U="emu:$IMG" P=/models/edge.gguf
	run load
	[ $RC -eq 2 ] || fail "no arguments: exit $RC, expected 2"
	bad 2 "PATH" load "$U"
	bad 2 "tier" load "$U" "$P" --tier 3
	bad 2 "tier" load "$U" "$P" --tier gpu
	bad 2 "queues" load "$U" "$P" --queues 0
	bad 2 "queues" load "$U" "$P" --queues abc
	bad 2 "nsid" load "$U" "$P" --nsid abc
	bad 2 "nsid" load "$U" "$P" --nsid 0
	bad 2 "unknown option|unrecognized" load "$U" "$P" --frob
	bad 2 "tensors|argument|value" load "$U" "$P" --tensors
	bad 2 "--tensors ''" load "$U" "$P" --tensors ''
	bad 2 "unexpected|argument" load "$U" "$P" extra
	if ok load --help; then grep -q 'usage: gpunvme load' "$OUT" || { fail "load --help has no usage line"; show; }; fi
	if ok help load; then grep -q 'usage: gpunvme load' "$OUT" || { fail "help load has no usage line"; show; }; fi
}

# ---- the generator, no gpunvme needed ------------------------------------------------
need_mkmodel() {
	[ -n "$MKMODEL" ] && [ -x "$MKMODEL" ] || { fail "no gpunvme-mkmodel binary given"; exit 1; }
}

group_mkmodel() {
	need_mkmodel
	local f mode min max size s c=$HERE/modelcheck.py
	for f in safetensors gguf; do
		# MODE MIN_BYTES MAX_BYTES
		for mode in "--edge 0 4194304" "--size=1 1 0" "--size=3M 3145728 0" "--size=8M 8388608 0" \
			"--size=40M 41943040 0"; do
			read -r mode min max <<<"$mode"
			for s in random compressible; do
				local args=(--format "$f" "$mode" --seed 5 -o "$WORK/m.$f" --manifest "$WORK/m.man")
				[ $s = compressible ] && args+=(--compressible)
				run_cmd "$MKMODEL" "${args[@]}" || continue
				[ $RC -eq 0 ] || { fail "mkmodel ${args[*]}: exit $RC"; show; continue; }
				run_cmd python3 "$c" "$WORK/m.$f" --manifest "$WORK/m.man" --data 5 "$s" || continue
				[ $RC -eq 0 ] || { fail "modelcheck on mkmodel ${args[*]}:"; cat "$OUT" >&2; }
				size=$(stat -c %s "$WORK/m.$f")
				[ "$size" -ge "$min" ] || fail "mkmodel ${args[*]}: $size bytes, less than --size"
				[ "$max" -eq 0 ] || [ "$size" -le "$max" ] || fail "mkmodel ${args[*]}: $size bytes, over $max"
			done
		done
		# deterministic; the seed changes the data, not the layout
		"$MKMODEL" --format "$f" --size 2M --seed 9 -o "$WORK/a" --manifest "$WORK/a.man" &&
			"$MKMODEL" --format "$f" --size 2M --seed 9 -o "$WORK/b" --manifest "$WORK/b.man" &&
			"$MKMODEL" --format "$f" --size 2M --seed 10 -o "$WORK/c" --manifest "$WORK/c.man" ||
			fail "mkmodel $f --size 2M failed"
		cmp -s "$WORK/a" "$WORK/b" || fail "mkmodel $f: same seed, different files"
		cmp -s "$WORK/a" "$WORK/c" && fail "mkmodel $f: different seeds, same file"
		cmp -s "$WORK/a.man" "$WORK/c.man" || fail "mkmodel $f: the seed changed the layout"
		# every tensor has its own bytes
		python3 - "$WORK/a" "$WORK/a.man" >"$WORK/dup.txt" <<'PY' || { fail "mkmodel $f: tensors with equal data"; cat "$WORK/dup.txt" >&2; }
import hashlib, sys
data = open(sys.argv[1], "rb").read()
seen = {}
for l in open(sys.argv[2]):
    n, _, _, off, size = l.rstrip("\n").split("\t")
    off, size = int(off), int(size)
    if size < 8:
        continue
    h = hashlib.sha256(data[off:off + size]).digest()
    if h in seen:
        print("%s and %s have the same data" % (seen[h], n)); sys.exit(1)
    seen[h] = n
PY
	done
	# usage errors: exit 2, a message naming the problem
	run_cmd "$MKMODEL"
	[ $RC -eq 2 ] || fail "mkmodel without arguments: exit $RC, expected 2"
	local u
	for u in "--format onnx --size 1M -o $WORK/x" "--format gguf -o $WORK/x" "--format gguf --size 1Q -o $WORK/x" \
		"--format gguf --size 1M" "--format gguf --size 1M --seed -3 -o $WORK/x" "--bogus"; do
		run_cmd "$MKMODEL" $u || continue
		[ $RC -eq 2 ] || fail "mkmodel $u: exit $RC, expected 2"
		grep -q '^gpunvme-mkmodel: ' "$ERR" || { fail "mkmodel $u: no message"; show; }
	done
	run_cmd "$MKMODEL" --format gguf --size 1M -o "$WORK/no/such/dir/x"
	[ $RC -eq 1 ] || fail "mkmodel to a missing directory: exit $RC, expected 1"
}

# Random-data models (incompressible, unlike the fixtures) copied into fresh
# images by mkfs.ext4 -d and mkfs.xfs -p, loaded, checked against the source
# file hashed by Python's hashlib.
group_roundtrip() {
	need_mkmodel
	command -v mkfs.ext4 >/dev/null 2>&1 || skip "no mkfs.ext4"
	local d=$WORK/tree f img
	mkdir -p "$d/m"
	"$MKMODEL" --format safetensors --size 40M --seed 21 -o "$d/m/r.safetensors" --manifest "$WORK/r.st.man" &&
		"$MKMODEL" --format gguf --size 24M --seed 22 -o "$d/m/r.gguf" --manifest "$WORK/r.gguf.man" ||
		{ fail "mkmodel failed"; return; }
	# the expected manifest, sha256 by hashlib
	python3 - "$d" "$WORK/r.st.man" "$WORK/r.gguf.man" >"$WORK/r.manifest" <<'PY' || { fail "manifest"; return; }
import hashlib, sys
d = sys.argv[1]
for man, f in ((sys.argv[2], "r.safetensors"), (sys.argv[3], "r.gguf")):
    data = open("%s/m/%s" % (d, f), "rb").read()
    for l in open(man, encoding="utf-8"):
        n, dt, sh, off, size = l.rstrip("\n").split("\t")
        h = hashlib.sha256(data[int(off):int(off) + int(size)]).hexdigest()
        print("/m/%s\t%s\t%s\t%s\t%s\t%s\t%s" % (f, n, dt, sh, off, size, h))
PY
	img=$WORK/rt-ext4.img
	truncate -s 96M "$img"
	mkfs.ext4 -q -F -b 4096 -d "$d" "$img" || { fail "mkfs.ext4 -d"; return; }
	for f in /m/r.safetensors /m/r.gguf; do
		ok load "emu:$img" "$f" --json --tier cpu --verify --no-progress && check_json "$WORK/r.manifest" "$f" "emu:$img" ext4 true
	done
	if command -v mkfs.xfs >/dev/null 2>&1; then
		img=$WORK/rt-xfs.img
		printf '/dev/null\n0 0\nd--755 0 0\nm d--755 0 0\nr.safetensors ---644 0 0 %s\nr.gguf ---644 0 0 %s\n$\n$\n' \
			"$d/m/r.safetensors" "$d/m/r.gguf" >"$WORK/proto"
		truncate -s 160M "$img"
		# two AGs larger than the files: xfsprogs 6.1's protofile copy
		# corrupts the next AG when a file is larger than one (see
		# scripts/demo-load.sh); xfs_repair -n says whether it went well
		if TEST_DIR=1 TEST_DEV=1 QA_CHECK_FS=1 mkfs.xfs -q -f -d agcount=2 -p "$WORK/proto" "$img" >"$WORK/mkfs.txt" 2>&1 &&
			{ ! command -v xfs_repair >/dev/null 2>&1 || xfs_repair -n "$img" >>"$WORK/mkfs.txt" 2>&1; }; then
			for f in /m/r.safetensors /m/r.gguf; do
				ok load "emu:$img" "$f" --json --tier cpu --verify --no-progress && check_json "$WORK/r.manifest" "$f" "emu:$img" xfs true
			done
		else
			echo "note: mkfs.xfs -p failed or made an unclean image ($(grep -m 1 -iE 'bad|error|refus' "$WORK/mkfs.txt")); XFS part skipped"
		fi
	fi
}

# A load of more than 16 x 64 MiB goes in larger pieces (1/16 of the load,
# cmd_load.c): 1.1 GiB of random tensors is read in 128 MiB pieces, the last
# one partial, and every tensor's sha256 must match the source file's.
group_pieces() {
	need_mkmodel
	command -v mkfs.ext4 >/dev/null 2>&1 || skip "no mkfs.ext4"
	local d=$WORK/tree img=$WORK/pieces.img
	mkdir -p "$d/m"
	"$MKMODEL" --format safetensors --size 1100M --seed 41 -o "$d/m/big.safetensors" --manifest "$WORK/big.man" ||
		{ fail "mkmodel failed"; return; }
	python3 - "$d" "$WORK/big.man" >"$WORK/big.manifest" <<'PY' || { fail "manifest"; return; }
import hashlib, sys
d, man = sys.argv[1:3]
with open("%s/m/big.safetensors" % d, "rb") as f:
    for l in open(man, encoding="utf-8"):
        n, dt, sh, off, size = l.rstrip("\n").split("\t")
        f.seek(int(off))
        h = hashlib.sha256(f.read(int(size))).hexdigest()
        print("/m/big.safetensors\t%s\t%s\t%s\t%s\t%s\t%s" % (n, dt, sh, off, size, h))
PY
	truncate -s 1300M "$img"
	mkfs.ext4 -q -F -b 4096 -d "$d" "$img" || { fail "mkfs.ext4 -d"; return; }
	rm -rf "$d"
	ok load "emu:$img" /m/big.safetensors --json --tier cpu --no-progress &&
		check_json "$WORK/big.manifest" /m/big.safetensors "emu:$img" ext4 false
}

# Every queue count, depth and MDTS a user can combine gives the same
# bytes: the edge-case model and a random one whose tensors span many
# commands, through controllers that grant few queues, shallow queues or
# small transfers. Explicit settings the controller cannot honour fail
# with the reason; defaults fit themselves to what it granted.
group_queue_sweep() {
	need_mkmodel
	command -v mkfs.ext4 >/dev/null 2>&1 || skip "no mkfs.ext4"
	local d=$WORK/tree img=$WORK/qs.img u o f
	CHECK_TIER=$TIER
	mkdir -p "$d/m"
	"$MKMODEL" --format safetensors --edge --seed 31 -o "$d/m/e.safetensors" --manifest "$WORK/e.man" &&
		"$MKMODEL" --format safetensors --size 12M --seed 32 -o "$d/m/r.safetensors" --manifest "$WORK/r.man" ||
		{ fail "mkmodel failed"; return; }
	python3 - "$d" >"$WORK/qs.manifest" <<'PY' || { fail "manifest"; return; }
import hashlib, sys
d = sys.argv[1]
for f, man in (("e.safetensors", "e.man"), ("r.safetensors", "r.man")):
    data = open("%s/m/%s" % (d, f), "rb").read()
    for l in open("%s/../%s" % (d, man), encoding="utf-8"):
        n, dt, sh, off, size = l.rstrip("\n").split("\t")
        h = hashlib.sha256(data[int(off):int(off) + int(size)]).hexdigest()
        print("/m/%s\t%s\t%s\t%s\t%s\t%s\t%s" % (f, n, dt, sh, off, size, h))
PY
	truncate -s 64M "$img"
	mkfs.ext4 -q -F -b 4096 -d "$d" "$img" || { fail "mkfs.ext4 -d"; return; }
	for u in "" "?mdts=2" "?mdts=3" "?nsq=1" "?mqes=3" "?nsq=2&mqes=1" "?nsq=1&mqes=1&mdts=2"; do
		for o in "" "--queues 1" "--queues 3 --depth 5" "--depth 2" "--depth 64" "--queues 64"; do
			# an explicit depth beyond the controller's is the user's to fix
			case "$u/$o" in
			*mqes=3*--depth\ 5* | *mqes=3*--depth\ 64* | *mqes=1*--depth\ 5* | *mqes=1*--depth\ 64*)
				# shellcheck disable=SC2086
				bad 1 "entries per queue" load "emu:$img$u" /m/r.safetensors --tier "$TIER" --no-progress $o
				continue ;;
			esac
			for f in /m/e.safetensors /m/r.safetensors; do
				# shellcheck disable=SC2086
				ok load "emu:$img$u" "$f" --json --tier "$TIER" --no-progress $o &&
					check_json "$WORK/qs.manifest" "$f" "emu:$img$u" ext4 false
			done
		done
		# the reference reader needs its own queue pair after the loads:
		# the GPU tiers keep theirs, so one granted queue is too few
		case "$TIER/$u" in
		cpu/* | */ | */?mdts* | */?mqes*) ;;
		*nsq=1*)
			bad 1 "second I/O queue pair" load "emu:$img$u" /m/r.safetensors --verify --tier "$TIER" --no-progress
			continue ;;
		esac
		ok load "emu:$img$u" /m/r.safetensors --json --verify --tier "$TIER" --no-progress &&
			check_json "$WORK/qs.manifest" /m/r.safetensors "emu:$img$u" ext4 true
	done
}

if ! declare -F "group_$GROUP" >/dev/null; then
	echo "FAIL: unknown group '$GROUP'" >&2
	exit 1
fi
"group_$GROUP"
echo "[$GROUP] $CHECKS commands, $FAILS failures"
[ "$FAILS" -eq 0 ]
