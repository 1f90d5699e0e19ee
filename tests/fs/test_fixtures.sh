#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# The gpunvme ls / stat / extents / cat commands on a fixture image
# (tests/fs/fixtures/), through the driver (emu:IMAGE) and --image:
#   test_fixtures.sh GPUNVME_BINARY FIXTURE_DIR WORK_DIR NAME
# Expected values come from the manifest (sizes, entry counts) and the
# content generator's known bytes; error cases check the exit code and the
# one-line "gpunvme: " message. Exit 0 pass, 1 fail, 77 skip (no zstd).
set -u

BIN=${1:?usage: test_fixtures.sh GPUNVME FIXTURE_DIR WORK_DIR NAME}
FX=${2:?}
WORK=${3:?}
NAME=${4:?}
T=${CLI_TEST_TIMEOUT:-120}
command -v zstd >/dev/null 2>&1 || { echo "SKIP: no zstd"; exit 77; }
[ -x "$BIN" ] || { echo "FAIL: $BIN is not executable" >&2; exit 1; }
mkdir -p "$WORK"
IMG=$WORK/$NAME.cli.img
trap 'rm -f "$IMG" "$WORK/$NAME".cli.*' EXIT
zstd -dqf "$FX/$NAME.img.zst" -o "$IMG" || { echo "FAIL: cannot decompress $NAME" >&2; exit 1; }
MAN=$WORK/$NAME.cli.manifest
zstd -dqf "$FX/$NAME.manifest.zst" -o "$MAN" || exit 1
OUT=$WORK/$NAME.cli.out
ERR=$WORK/$NAME.cli.err
FAILS=0
CHECKS=0

fail() { echo "FAIL [$NAME]: $*" >&2; FAILS=$((FAILS + 1)); }

# run ARGS...: RC, stdout in $OUT, stderr in $ERR; hangs, signals and
# sanitizer reports fail at once
run() {
	timeout -k 5 "$T" "$BIN" "$@" >"$OUT" 2>"$ERR"
	RC=$?
	CHECKS=$((CHECKS + 1))
	if [ $RC -eq 124 ] || [ $RC -eq 137 ]; then fail "hang: gpunvme $*"; return 1; fi
	if [ $RC -ge 128 ]; then fail "signal $((RC - 128)): gpunvme $*"; return 1; fi
	if grep -qE 'Sanitizer|runtime error:' "$ERR"; then fail "sanitizer: gpunvme $*"; cat "$ERR" >&2; return 1; fi
	return 0
}

ok() {  # ok ARGS...: must succeed with an empty stderr
	run "$@" || return 1
	if [ $RC -ne 0 ]; then fail "rc $RC: gpunvme $*: $(head -c 300 "$ERR")"; return 1; fi
	return 0
}

err() {  # err CODE PHRASE ARGS...: must fail with CODE and one line containing PHRASE
	local code=$1 phrase=$2
	shift 2
	run "$@" || return 1
	[ $RC -eq "$code" ] || { fail "rc $RC, expected $code: gpunvme $*: $(head -c 300 "$ERR")"; return 1; }
	[ "$(wc -l < "$ERR")" -eq 1 ] || fail "not one line on stderr: gpunvme $*"
	grep -q '^gpunvme: ' "$ERR" || fail "no 'gpunvme: ' prefix: gpunvme $*"
	grep -qF -- "$phrase" "$ERR" || fail "message lacks '$phrase': $(cat "$ERR")"
}

manifest_size() { awk -F'\t' -v p="$1" '$2 == p { print $3 }' "$MAN"; }

URI=emu:$IMG
case $NAME in ext4*) FS=ext4 ;; *) FS=xfs ;; esac
case $NAME in *-1k) BS=1024 ;; *) BS=4096 ;; esac

# ---- ls --------------------------------------------------------------------
for SRC in "$URI" "--image=$IMG"; do
	if ok ls $SRC /; then
		for n in tiny.txt empty large.bin sparse.bin prealloc.bin frag deep unicode mid bigdir symlink-long; do
			grep -qx "$n" "$OUT" || fail "ls $SRC /: no $n"
		done
	fi
	if ok ls $SRC /bigdir; then
		[ "$(wc -l < "$OUT")" -eq 10000 ] || fail "ls $SRC /bigdir: $(wc -l < "$OUT") lines, expected 10000"
		[ "$(sort -u "$OUT" | wc -l)" -eq 10000 ] || fail "ls $SRC /bigdir: duplicates"
		[ "$(head -n 1 "$OUT")" = entry-00000-with-a-longer-name ] || fail "ls /bigdir not sorted: $(head -n 1 "$OUT")"
	fi
done
if ok ls "$URI" /unicode -l; then
	grep -q '^-rw-r--r-- .* na.*ve-ファイル-😀.txt$' "$OUT" || fail "ls -l /unicode: no UTF-8 file line: $(cat "$OUT")"
	grep -q '^lrwxrwxrwx .* link-to-tiny -> ../tiny.txt$' "$OUT" || fail "ls -l /unicode: no symlink line"
	grep -q '^drwxr-xr-x .* Ελληνικά$' "$OUT" || fail "ls -l /unicode: no directory line"
fi
if ok ls "$URI" /frag --json; then
	[ "$(grep -c '"name"' "$OUT")" -eq 4 ] || fail "ls --json /frag: not 4 entries"
	grep -q '"size": '"$(manifest_size /frag/a)" "$OUT" || fail "ls --json /frag: size of a"
fi
DEEP=$(awk -F'\t' '$2 ~ /leaf.txt$/ { print $2 }' "$MAN")
ok ls "$URI" "$DEEP" && { [ "$(cat "$OUT")" = "$DEEP" ] || fail "ls of a file prints its path"; }

# ---- stat --------------------------------------------------------------------
if ok stat "$URI" /prealloc.bin --json; then
	grep -q '"fs": "'$FS'"' "$OUT" || fail "stat: fs type"
	grep -q '"block_size": '$BS "$OUT" || fail "stat: block size"
	grep -q '"size": 1048576' "$OUT" || fail "stat: size"
	grep -q '"type": "file"' "$OUT" || fail "stat: type"
fi
ok stat --image "$IMG" /deep && { grep -q 'Type: directory' "$OUT" || fail "stat /deep: not a directory"; }

# ---- extents -------------------------------------------------------------------
if ok extents "$URI" /prealloc.bin --json; then
	grep -q '"lba_size": 512' "$OUT" || fail "extents: lba_size"
	grep -q '"unwritten": true' "$OUT" || fail "extents: no unwritten extent in /prealloc.bin"
	grep -q '"logical": 262144' "$OUT" || fail "extents: no extent at the written 256 KiB"
	# every LBA is physical / 512
	awk '/"physical"/ { gsub(/[^0-9]/, ""); p = $0 } /"lba"/ { gsub(/[^0-9]/, ""); if ($0 * 512 != p) bad = 1 }
		END { exit bad }' "$OUT" || fail "extents: lba != physical / 512"
fi
if ok extents "$URI" /frag/deep; then
	n=$(awk '/extents$/ { print $(NF - 1) }' "$OUT" | head -n 1)
	[ "${n:-0}" -ge 2000 ] || fail "extents /frag/deep: $n extents, expected >= 2000"
fi
if ok extents --image "$IMG" /large.bin; then
	grep -q 'file size 4295075488' "$OUT" || fail "extents /large.bin: size"
	grep -qE '^ +4294975488 ' "$OUT" || fail "extents /large.bin: no extent past 4 GiB"
fi

# ---- cat -----------------------------------------------------------------------
ok cat "$URI" /tiny.txt && { [ "$(wc -c < "$OUT")" -eq 13 ] || fail "cat /tiny.txt: $(wc -c < "$OUT") bytes"; }
if ok cat "$URI" /sparse.bin; then
	cp "$OUT" "$WORK/$NAME.cli.sparse"
	[ "$(wc -c < "$OUT")" -eq "$(manifest_size /sparse.bin)" ] || fail "cat /sparse.bin: size"
	# the first 128 KiB are a hole: zeroes
	[ "$(head -c 131072 "$OUT" | tr -d '\0' | wc -c)" -eq 0 ] || fail "cat /sparse.bin: hole not zero"
	ok cat --image "$IMG" /sparse.bin && { cmp -s "$OUT" "$WORK/$NAME.cli.sparse" || fail "cat: emu: and --image differ"; }
fi
# a symlink: followed inside the file system; stat shows the link itself
ok cat "$URI" /unicode/link-to-tiny && { [ "$(wc -c < "$OUT")" -eq 13 ] || fail "cat of link-to-tiny: not /tiny.txt"; }
ok stat "$URI" /unicode/link-to-tiny && { grep -q 'link-to-tiny -> ../tiny.txt' "$OUT" || fail "stat of a link: no target"; }
ok extents "$URI" /unicode/link-to-tiny --json && { grep -q '"size": 13' "$OUT" || fail "extents of a link: not /tiny.txt"; }
ok cat "$URI" /empty && { [ ! -s "$OUT" ] || fail "cat /empty: not empty"; }

# ---- errors --------------------------------------------------------------------
err 1 'not found' cat "$URI" /no/such/file
err 1 'not a file' cat "$URI" /frag
err 1 'regular files only' extents "$URI" /deep
err 1 'not a directory' ls "$URI" /tiny.txt/x
err 2 'use --image' ls "$IMG" /
err 2 'missing PATH' stat "$URI"
err 2 'missing device URI' ls
err 2 'unexpected argument' ls "$URI" / /x
err 2 '--fiemap' extents --fiemap "$IMG" "$URI"
err 2 'no --json' cat "$URI" /tiny.txt --json
err 2 'past the end' ls "$URI" --offset 100G
err 1 'namespace 2' ls "$URI" --nsid 2
err 1 'no partition table (GPT or MBR): if the file system starts elsewhere, give --offset BYTES' ls --image "$MAN" /
err 1 'no file system found' ls --image "$MAN" --offset 0 /
# FIEMAP on this machine: a file in WORK is not on an NVMe namespace (or the
# file system has no FIEMAP)
run extents --fiemap "$MAN"
if [ $RC -eq 0 ]; then
	grep -q 'device: nvme' "$OUT" || fail "extents --fiemap succeeded off NVMe: $(head -n 1 "$OUT")"
else
	[ $RC -eq 1 ] && grep -qE 'not on an NVMe namespace|does not support FIEMAP' "$ERR" ||
		fail "extents --fiemap: rc $RC: $(cat "$ERR")"
fi

echo "$NAME: $CHECKS commands, $FAILS failures"
[ $FAILS -eq 0 ] || exit 1
exit 0
