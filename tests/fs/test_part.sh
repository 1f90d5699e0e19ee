#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# Partition tables made by the real tools (sfdisk for GPT and MBR, fdisk -b
# 4096 for a GPT on 4 KiB LBAs), file systems made separately (mkfs.ext4 -d,
# mkfs.xfs -p) and dd'ed into their partitions; then the CLI finds them
# with no --offset: one file system (GPT, MBR primary, MBR logical 5),
# several (ambiguous: named, --partition N picks), a missing partition
# number, a corrupt primary GPT (the backup is used, with a note), both
# headers corrupt, a bare disk, 4 KiB LBAs through the emulator.
# Usage: test_part.sh GPUNVME. Skipped (77) without sfdisk or mkfs.ext4.
set -u
BIN=${1:?usage: test_part.sh GPUNVME}
T=${CLI_TEST_TIMEOUT:-120}
for t in sfdisk mkfs.ext4; do
	command -v $t >/dev/null 2>&1 || { echo "SKIP: no $t (Debian: fdisk, e2fsprogs)"; exit 77; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-part.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/stdout
ERR=$WORK/stderr
FAILS=0
CHECKS=0
BAD_GREP=-F
. "$(dirname "${BASH_SOURCE[0]}")/../harness/cli_checks.sh"

expect_out() { grep -qF -- "$1" "$OUT" || { fail "stdout lacks '$1'"; show; }; }
expect_err() { grep -qF -- "$1" "$ERR" || { fail "stderr lacks '$1'"; show; }; }

# file systems, each with /hello saying which one it is
mkdir -p "$WORK/a" "$WORK/b"
echo "ext4 A" >"$WORK/a/hello"
echo "ext4 B" >"$WORK/b/hello"
truncate -s 16M "$WORK/a.fs" "$WORK/b.fs"
mkfs.ext4 -q -F -d "$WORK/a" "$WORK/a.fs" || { echo "FAIL: mkfs.ext4" >&2; exit 1; }
mkfs.ext4 -q -F -d "$WORK/b" "$WORK/b.fs" || exit 1
HAVE_XFS=0
if command -v mkfs.xfs >/dev/null 2>&1; then
	echo "xfs C" >"$WORK/c-hello"
	printf '/dev/null\n0 0\nd--755 0 0\nhello ---644 0 0 %s\n$\n' "$WORK/c-hello" >"$WORK/c.proto"
	truncate -s 300M "$WORK/c.fs"
	TEST_DIR=1 TEST_DEV=1 QA_CHECK_FS=1 mkfs.xfs -q -f -p "$WORK/c.proto" "$WORK/c.fs" >/dev/null 2>&1 && HAVE_XFS=1
fi

put() {  # put FS DISK BYTE-OFFSET
	dd if="$1" of="$2" bs=1M seek=$(($3 / 1048576)) conv=notrunc,sparse status=none
}

# ---- GPT, one file system (partition 2 is empty) --------------------------------
D=$WORK/gpt1.img
truncate -s 64M "$D"
printf 'label: gpt\nstart=2048, size=32768, name=models\nstart=34816, size=32768\n' | sfdisk -q "$D" >/dev/null ||
	fail "sfdisk gpt1"
put "$WORK/a.fs" "$D" $((2048 * 512))
ok cat "emu:$D" /hello && expect_out "ext4 A"
ok cat --image "$D" /hello && expect_out "ext4 A"
ok ls "emu:$D" / && expect_out "hello"
ok extents "emu:$D" /hello --json && json_ok=1
ok cat "emu:$D" /hello --partition 1 && expect_out "ext4 A"
bad 1 "no partition 9; the gpt table has: 1: gpt:0fc63daf-8483-4772-8e79-3d69d8477de4 at byte 1048576" \
	cat "emu:$D" /hello --partition 9
bad 1 "name models" cat "emu:$D" /hello --partition 9
bad 1 "no file system found" cat "emu:$D" /hello --partition 2
bad 2 "--offset and --partition both" cat "emu:$D" /hello --partition 1 --offset 1M
bad 2 "--offset and --partition both" load "emu:$D" /hello --partition 1 --offset 1M
ok cat "emu:$D" /hello --offset 1M && expect_out "ext4 A"

# ---- corrupt primary GPT header: the backup is used, with a note ------------------
cp "$D" "$WORK/gptbad.img"
printf '\xff\xff\xff\xff' | dd of="$WORK/gptbad.img" bs=1 seek=$((512 + 16)) conv=notrunc status=none
ok cat "emu:$WORK/gptbad.img" /hello && { expect_out "ext4 A"; expect_err "primary GPT is corrupt"; expect_err "backup GPT"; }
# and the backup too: a clear error
printf '\xff\xff\xff\xff' | dd of="$WORK/gptbad.img" bs=1 seek=$((64 * 1048576 - 512 + 16)) conv=notrunc status=none
bad 1 "both GPT headers are corrupt" cat "emu:$WORK/gptbad.img" /hello

# ---- GPT, two file systems: ambiguous; --partition picks ----------------------------
D=$WORK/gpt2.img
truncate -s 400M "$D"
if [ $HAVE_XFS = 1 ]; then
	printf 'label: gpt\nstart=2048, size=32768\nstart=40960, size=614400\n' | sfdisk -q "$D" >/dev/null || fail "sfdisk gpt2"
	put "$WORK/a.fs" "$D" $((2048 * 512))
	put "$WORK/c.fs" "$D" $((40960 * 512))
	bad 1 "2 partitions hold file systems (1: ext4 at byte 1048576, 16777216 bytes; 2: xfs at byte 20971520" \
		cat "emu:$D" /hello
	bad 1 "choose one with --partition N" cat "emu:$D" /hello
	ok cat "emu:$D" /hello --partition 2 && expect_out "xfs C"
	ok cat "emu:$D" /hello --partition 1 && expect_out "ext4 A"
else
	echo "note: no mkfs.xfs: the GPT ext4 + XFS case uses two ext4"
	printf 'label: gpt\nstart=2048, size=32768\nstart=40960, size=32768\n' | sfdisk -q "$D" >/dev/null || fail "sfdisk gpt2"
	put "$WORK/a.fs" "$D" $((2048 * 512))
	put "$WORK/b.fs" "$D" $((40960 * 512))
	bad 1 "2 partitions hold file systems" cat "emu:$D" /hello
	ok cat "emu:$D" /hello --partition 2 && expect_out "ext4 B"
fi

# ---- MBR: primary, and a logical partition (number 5) in an extended one ----------
D=$WORK/mbr1.img
truncate -s 64M "$D"
printf 'label: dos\nstart=2048, size=32768, type=83\n' | sfdisk -q "$D" >/dev/null || fail "sfdisk mbr1"
put "$WORK/a.fs" "$D" $((2048 * 512))
ok cat "emu:$D" /hello && expect_out "ext4 A"

D=$WORK/mbr5.img
truncate -s 128M "$D"
# 1: primary, no file system; 2: extended (not listed: it holds no data);
# 5 and 6: logical, B in 6
printf 'label: dos\nstart=2048, size=16384, type=83\nstart=20480, size=200000, type=5\nstart=22528, size=34816, type=83\nstart=59392, size=34816, type=83\n' |
	sfdisk -q "$D" >/dev/null || fail "sfdisk mbr5"
put "$WORK/b.fs" "$D" $((59392 * 512))
ok cat "emu:$D" /hello && expect_out "ext4 B"
ok cat "emu:$D" /hello --partition 6 && expect_out "ext4 B"
bad 1 "no partition 3; the mbr table has: 1: mbr:0x83 at byte 1048576" cat "emu:$D" /hello --partition 3
bad 1 "5: mbr:0x83 at byte $((22528 * 512))" cat "emu:$D" /hello --partition 3
bad 1 "no file system found" cat "emu:$D" /hello --partition 5
# no file system in any partition: the scheme, the partitions, both options
dd if=/dev/zero of="$D" bs=512 seek=59392 count=8 conv=notrunc status=none
bad 1 "a mbr partition table with 3 partitions (1: mbr:0x83 at byte 1048576" cat "emu:$D" /hello
bad 1 "give --partition N or --offset BYTES" cat "emu:$D" /hello

# ---- a bare disk: no file system, no table ----------------------------------------
truncate -s 8M "$WORK/bare.img"
bad 1 "no ext4 or XFS file system at byte 0 and no partition table (GPT or MBR): if the file system starts elsewhere, give --offset BYTES" \
	ls "emu:$WORK/bare.img" /
bad 1 "the device has no partition table" ls "emu:$WORK/bare.img" / --partition 1
# a whole-disk file system needs nothing
ok cat "emu:$WORK/a.fs" /hello && expect_out "ext4 A"

# ---- GPT on 4 KiB LBAs: the header at byte 4096, LBAs of 4096 bytes -----------------
if command -v fdisk >/dev/null 2>&1; then
	D=$WORK/gpt4k.img
	truncate -s 64M "$D"
	# partition 1 at 4 KiB LBA 256 (byte 1 MiB), 20 MiB
	printf 'g\nn\n1\n256\n+20M\nw\n' | fdisk -b 4096 "$D" >/dev/null 2>&1 || fail "fdisk -b 4096"
	put "$WORK/a.fs" "$D" 1048576
	ok cat "emu:$D?lbads=12" /hello && expect_out "ext4 A"
	ok extents "emu:$D?lbads=12" /hello --json && expect_out '"lba_size": 4096'
	# read as 512-byte LBAs the table is not there: no GPT at byte 512
	bad 1 "there is one at byte 4096, written for 4096-byte LBAs" cat --image "$D" /hello
fi

echo "test_part: $CHECKS commands, $FAILS failures"
[ $FAILS -eq 0 ]
