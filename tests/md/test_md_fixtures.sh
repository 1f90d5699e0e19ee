#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# md arrays made by Debian's mdadm (tests/md/fixtures, see
# scripts/fixtures/make-md-fixtures.sh), read through the driver with every
# member its own emulated controller:
#   test_md_fixtures.sh GPUNVME FIXTURE_DIR WORK_DIR NAME MD_LOAD_FILES
#       members in reversed order (the superblocks give the order): ls, stat,
#       extents, every file of the manifest through `cat` (sha256sum against
#       the guest's coreutils manifest), the model through `load --tier cpu`
#       (each tensor's sha256 against the bytes cat gave, parsed here);
#       and two members as namespaces of one controller.
#   test_md_fixtures.sh GPUNVME FIXTURE_DIR WORK_DIR --refusals
#       RAID1/5/10, a missing member, members of two arrays, the same
#       member twice, a member with no superblock, a truncated member, bad
#       md: syntax: each a clear one-line error.
# Exit 0 pass, 1 fail. Missing zstd/python3 is a failure (CI installs them).
set -u
BIN=${1:?usage: test_md_fixtures.sh GPUNVME FIXTURE_DIR WORK_DIR NAME|--refusals}
FX=${2:?}
WORK=${3:?}
NAME=${4:?}
LOADFILES=${5:-}   # tests/md/md_load_files: every file through the layer loader
T=${CLI_TEST_TIMEOUT:-120}
for t in zstd python3 sha256sum; do
	command -v $t >/dev/null 2>&1 || { echo "FAIL: no $t (apt-get install zstd python3 coreutils)" >&2; exit 1; }
done
W=$WORK/$NAME.$$
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
OUT=$W/out
ERR=$W/err
FAILS=0
CHECKS=0
fail() { echo "FAIL [$NAME]: $*" >&2; FAILS=$((FAILS + 1)); }
run() {
	timeout -k 5 "$T" "$BIN" "$@" >"$OUT" 2>"$ERR"
	RC=$?
	CHECKS=$((CHECKS + 1))
	if [ $RC -eq 124 ] || [ $RC -eq 137 ]; then fail "hang: gpunvme $*"; return 1; fi
	if [ $RC -ge 128 ]; then fail "signal $((RC - 128)): gpunvme $*"; return 1; fi
	if grep -qE 'Sanitizer|runtime error:' "$ERR"; then fail "sanitizer: gpunvme $*"; cat "$ERR" >&2; return 1; fi
	return 0
}
ok() {
	run "$@" || return 1
	if [ $RC -ne 0 ]; then fail "rc $RC: gpunvme $*: $(head -c 400 "$ERR")"; return 1; fi
}
err() {  # err CODE PHRASE ARGS...
	local code=$1 phrase=$2
	shift 2
	run "$@" || return 1
	[ $RC -eq "$code" ] || { fail "rc $RC, expected $code: gpunvme $*: $(head -c 300 "$ERR")"; return 1; }
	[ "$(wc -l < "$ERR")" -eq 1 ] || fail "not one line on stderr: gpunvme $*: $(cat "$ERR")"
	grep -q '^gpunvme: ' "$ERR" || fail "no 'gpunvme: ' prefix: gpunvme $*"
	grep -qF -- "$phrase" "$ERR" || fail "message lacks '$phrase': $(cat "$ERR")"
}
unpack() {  # unpack ARRAY -> members in $W/ARRAY.mK.img, count in $NM
	NM=0
	while [ -f "$FX/$1.m$NM.img.zst" ]; do
		zstd -dqf "$FX/$1.m$NM.img.zst" -o "$W/$1.m$NM.img" || { fail "cannot decompress $1.m$NM"; return 1; }
		NM=$((NM + 1))
	done
	[ $NM -gt 0 ] || { fail "no members of $1 in $FX"; return 1; }
}
uri_rev() {  # uri_rev ARRAY N: md: URI with the members in reversed order
	local u= k
	for ((k = $2 - 1; k >= 0; k--)); do
		u="$u${u:+;}emu:$W/$1.m$k.img"
	done
	echo "md:$u"
}

if [ "$NAME" = --refusals ]; then
	NAME=refusals
	for a in raid1-v12 raid5-v12 raid10-v090; do
		unpack $a || continue
		U=md:emu:$W/$a.m0.img
		for ((k = 1; k < NM; k++)); do U="$U;emu:$W/$a.m$k.img"; done
		lvl=${a%%-*}
		err 1 "is $lvl: only RAID0 and linear" ls "$U" /
	done
	A=r0-v12-c64-ext4
	unpack $A
	B=r0-v11-c16-ext4
	unpack $B
	err 1 "slot 2 missing (2 of 3 members given)" ls "md:emu:$W/$A.m0.img;emu:$W/$A.m1.img" /
	err 1 "give the members of one array" ls "md:emu:$W/$A.m0.img;emu:$W/$B.m0.img;emu:$W/$A.m2.img" /
	err 1 "are the same namespace" ls "md:emu:$W/$A.m0.img;emu:$W/$A.m0.img;emu:$W/$A.m2.img" /
	cp "$W/$A.m0.img" "$W/copy.img"
	err 1 "are both slot 0" ls "md:emu:$W/$A.m0.img;emu:$W/copy.img;emu:$W/$A.m2.img" /
	truncate -s 8M "$W/zero.img"
	err 1 "no md superblock" ls "md:emu:$W/$A.m0.img;emu:$W/zero.img;emu:$W/$A.m2.img" /
	cp "$W/$A.m1.img" "$W/short.img"
	truncate -s 12M "$W/short.img"
	err 1 "truncated image" ls "md:emu:$W/$A.m0.img;emu:$W/short.img;emu:$W/$A.m2.img" /
	err 2 "missing members after 'md:'" ls "md:" /
	err 2 "empty member" ls "md:emu:$W/$A.m0.img;;emu:$W/$A.m1.img" /
	err 2 "is not a namespace number" ls "md:emu:$W/$A.m0.img#x;emu:$W/$A.m1.img" /
	err 2 "unknown bus" ls "md:foo:bar" /
	err 2 "nested arrays" ls "md:md:emu:$W/$A.m0.img" /
	err 2 "is an md array" id-ctrl "md:emu:$W/$A.m0.img"
	[ $FAILS -eq 0 ] && { echo "PASS [$NAME]: $CHECKS checks"; exit 0; }
	echo "FAIL [$NAME]: $FAILS of $CHECKS checks" >&2
	exit 1
fi

unpack "$NAME" || exit 1
MAN=$FX/$NAME.manifest
[ -s "$MAN" ] || { echo "FAIL [$NAME]: no manifest $MAN" >&2; exit 1; }
U=$(uri_rev "$NAME" $NM)
ok ls "$U" / && for f in big.txt dir models tiny.txt sparse.bin; do
	grep -qx "$f" "$OUT" || fail "ls /: no $f: $(tr '\n' ' ' < "$OUT")"
done
if ok stat "$U" /big.txt --json; then
	grep -q '"size": 1600017' "$OUT" || fail "stat /big.txt: $(cat "$OUT")"
fi
# the array's extents and their per-member pieces cover the same bytes
if ok extents "$U" /big.txt --json; then
	python3 - "$OUT" "$NM" <<'PY' || fail "extents --json: member pieces do not cover the extents"
import json, sys
d = json.load(open(sys.argv[1]))
a = sum(e["length"] for e in d["extents"])
p = d["member_extents"]
assert a == sum(e["length"] for e in p) and a > 0, (a, len(p))
assert all(0 <= e["member"] < int(sys.argv[2]) for e in p)
PY
fi
# every file byte-exact through cat, against coreutils' sha256sum in the guest
n=0
while read -r sum path; do
	[ -n "$path" ] || continue
	if ok cat "$U" "$path" > /dev/null; then
		got=$(sha256sum < "$OUT" | cut -d' ' -f1)
		[ "$got" = "$sum" ] || fail "cat $path: sha256 $got, manifest $sum"
		[ "$path" != /models/model.safetensors ] || cp "$OUT" "$W/model.safetensors"
		n=$((n + 1))
	fi
done < "$MAN"
[ $n -ge 8 ] || fail "only $n files checked"
# every file through the layer loader too (md_load_files: whole-file loads, sha256)
if [ -n "$LOADFILES" ]; then
	timeout -k 5 "$T" "$LOADFILES" "$U" "$MAN" > "$OUT" 2> "$ERR"
	rc=$?
	CHECKS=$((CHECKS + 1))
	[ $rc -eq 0 ] || fail "md_load_files rc $rc: $(grep -v '^ok ' "$OUT" | head -3) $(head -c 300 "$ERR")"
	[ "$(grep -c '^ok ' "$OUT")" -eq "$(grep -c . "$MAN")" ] || fail "md_load_files: $(grep -c '^ok ' "$OUT") of $(grep -c . "$MAN") files"
	# the model through the layer stream on the array, windows 1-3
	[ "$(grep -c '^streamed /models/model.safetensors' "$OUT")" -eq 3 ] ||
		fail "md_load_files: the model was not streamed with windows 1-3: $(grep '^streamed' "$OUT")"
	# the assembled size against mdadm --detail's "Array Size" (KiB), the
	# chunk against its "Chunk Size"
	want=$(awk '/Array Size :/ { print $4; exit }' "$FX/$NAME.detail.txt")
	got=$(awk '$1 == "array" { print $NF / 1024; exit }' "$OUT")
	[ -n "$want" ] && [ "$got" = "$want" ] || fail "array size ${got:-?} KiB, mdadm says ${want:-?} KiB"
	wchunk=$(awk '/Chunk Size :/ { sub("K", "", $4); print $4; exit }' "$FX/$NAME.detail.txt")
	gchunk=$(awk '$1 == "array" { print $10 / 1024; exit }' "$OUT")
	[ -z "$wchunk" ] || [ "$gchunk" = "$wchunk" ] || fail "chunk $gchunk KiB, mdadm says $wchunk KiB"
else
	fail "no md_load_files given: files are not checked through the loader"
fi
# the model through load (CPU tier: every member its own loader and queues)
if [ -s "$W/model.safetensors" ] && ok load "$U" /models/model.safetensors --tier cpu --json --verify; then
	python3 - "$W/model.safetensors" "$OUT" "$NM" "$NAME" <<'PY' || fail "load: tensor bytes differ from the file (see above)"
import hashlib, json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
hdr = json.loads(blob[8:8 + n])
base = 8 + n
res = json.load(open(sys.argv[2]))
got = {t["name"]: t["sha256"] for t in res["tensors"]}
want = {k: hashlib.sha256(blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]]).hexdigest()
        for k, v in hdr.items() if k != "__metadata__"}
bad = [k for k in want if got.get(k) != want[k]]
if bad or len(got) != len(want):
    print("tensors differing:", bad[:5], len(got), len(want), file=sys.stderr)
    sys.exit(1)
members = res.get("members", [])
if len(members) != int(sys.argv[3]):
    print("members:", members, file=sys.stderr)
    sys.exit(1)
# RAID0: every member read its share (the model spans chunks of each);
# linear arrays keep it on one member
if sys.argv[4].startswith("r0-") and sum(1 for m in members if m["commands"] > 0) < 2:
    print("only one member read:", members, file=sys.stderr)
    sys.exit(1)
PY
fi
# every member a namespace of one controller: an emulator with NM
# namespaces (the members in reverse order)
if [ $NM -ge 2 ]; then
	C="emu:$W/$NAME.m0.img?ns=$W/$NAME.m1.img"
	for ((k = 2; k < NM; k++)); do C="$C&ns=$W/$NAME.m$k.img"; done
	U2="md:$C#$NM"
	for ((k = NM - 1; k >= 1; k--)); do U2="$U2;$C#$k"; done
	read -r sum path < "$MAN"
	if ok cat "$U2" "$path"; then
		[ "$(sha256sum < "$OUT" | cut -d' ' -f1)" = "$sum" ] || fail "cat $path over namespaces of one controller"
	fi
	# and the loader: the members' loaders on threads of their own, one
	# controller; 16 queue pairs each (the controller is asked for all)
	msum=$(awk '$2 == "/models/model.safetensors" { print $1 }' "$MAN")
	if ok load "$U2" /models/model.safetensors --tier cpu --queues 16 --verify --json; then
		grep -q '"verified": true' "$OUT" || fail "load over namespaces of one controller: not verified"
	fi
	[ -n "$msum" ] || fail "no model in the manifest"
fi
[ $FAILS -eq 0 ] && { echo "PASS [$NAME]: $CHECKS checks, $n files"; exit 0; }
echo "FAIL [$NAME]: $FAILS of $CHECKS checks" >&2
exit 1
