#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# gpunvme doctor against the fixtures of test_doctor.c (written with
# `test_doctor mkfixture NAME DIR`):
#   doctor_cli.sh GPUNVME TEST_DOCTOR CAPTURE_SCRIPT GROUP
# groups: fixtures (text and exit status of every fixture), json (the same
# verdicts in JSON), usage (option errors), capture (the capture script
# copied from each fixture gives the same JSON: the script and the reader
# agree on the file list).
set -u

BIN=${1:?usage: doctor_cli.sh GPUNVME TEST_DOCTOR CAPTURE GROUP}
MK=${2:?}
CAPTURE=${3:?}
GROUP=${4:?}
T=${CLI_TEST_TIMEOUT:-60}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-doctor.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
OUT=$WORK/stdout
ERR=$WORK/stderr
FAILS=0
CHECKS=0
FAIL_TAG=$GROUP
BAD_GREP=-F
. "$(dirname "${BASH_SOURCE[0]}")/../harness/cli_checks.sh"

FIXTURES="seed004 seed004-d3 server-switch h100-vm no-nvidia broken"

fx() { # NAME: the fixture's directory, built once
	[ -d "$WORK/fx/$1" ] || "$MK" mkfixture "$1" "$WORK/fx/$1" || fail "mkfixture $1"
	echo "$WORK/fx/$1"
}

expect_out() {
	grep -qF -- "$1" "$OUT" || { fail "stdout lacks '$1'"; show; }
}

json_check() { # PYTHON-EXPR over d
	command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if eval(sys.argv[2]) else 3)' \
		"$OUT" "$1" 2>"$WORK/json.err" || { fail "JSON check failed: $1"; cat "$WORK/json.err" >&2; show; }
}

# exit status 1: stdout has the report, stderr one line
no_path() { # PHRASE ARGS...
	local pat=$1
	shift
	bad 1 "$pat" "$@"
}

# Captures of real machines (scripts/doctor-capture.sh, committed as
# tests/doctor/captures/NAME.tgz): the inventory and verdicts doctor gives
# for them. h200-vm: the project's GPU machine, an H200 behind a
# hypervisor (firecracker), no NVMe, no IOMMU; BAR0 64-bit, so BAR1 is on
# resource line 2. qemu-iommu, qemu-noiommu: the QEMU guests (see below).
CAPS=$(cd "$(dirname "${BASH_SOURCE[0]}")/captures" && pwd)
cap() { # NAME: the capture, unpacked once
	if [ ! -d "$WORK/cap/$1" ]; then
		mkdir -p "$WORK/cap/$1" && tar xzf "$CAPS/$1.tgz" -C "$WORK/cap/$1" || fail "unpack $1"
	fi
	echo "$WORK/cap/$1"
}

group_captured() {
	local d
	d=$(cap h200-vm)
	no_path "no NVMe controller found" doctor --root "$d"
	expect_out "IOMMU: off"
	expect_out "NVIDIA driver: 580.159.04, open kernel module: yes"
	expect_out "dma-buf export: yes"
	expect_out "0000:00:06.0 10de:2335 NVIDIA H200, driver nvidia, power D0, link 32 GT/s x16, BAR1 256 GiB"
	run doctor --root "$d" --json
	[ "$RC" -eq 1 ] || fail "h200-vm --json: exit $RC, expected 1"
	json_check 'd["gpus"][0]["bar1_bytes"] == 256 << 30 and d["gpus"][0]["link_gts"] == 32 and d["gpus"][0]["link_width"] == 16'
	json_check 'd["nvme"] == [] and d["pairs"] == [] and d["tier1_pairs"] == 0'
	json_check 'd["system"]["iommu"] == "off" and d["system"]["nvidia_open"] == "yes" and d["system"]["dmabuf"] == "yes"'
	json_check 'd["system"]["memlock"] == "unlimited" and d["system"]["vfio_pci"] == "no"'

	# the QEMU guests of tests/qemu/scenarios/doctor.sh and doctor_noiommu.sh
	# (captured by busybox sh in the guest), where the probes then did what
	# these verdicts say: vfio-pci yes (idle in D3hot: vfio-pci's runtime
	# PM), uio_pci_generic yes (identity domain / no IOMMU), nvme no
	d=$(cap qemu-iommu)
	no_path "no NVIDIA GPU found" doctor --root "$d"
	expect_out "IOMMU: passthrough (5 IOMMU groups, iommu=pt on the kernel command line)"
	expect_out "0000:00:04.0 1b36:0010 driver vfio-pci, power D3hot, link 2.5 GT/s x1, IOMMU group 1"
	expect_out "vfio-pci's runtime power management"
	expect_out "NVMe 0000:00:06.0 is bound to nvme: the kernel owns it"
	run doctor --root "$d" --json
	json_check '[(n["bdf"], n["driver"], n["iommu_group"], n["userspace"]["answer"]) for n in d["nvme"]] == [("0000:00:04.0", "vfio-pci", 1, "yes"), ("0000:00:05.0", "uio_pci_generic", 2, "yes"), ("0000:00:06.0", "nvme", 3, "no")]'
	json_check 'd["nvme"][2]["kernel_name"] == "nvme2" and d["nvme"][2]["namespaces"] == 1 and d["system"]["hugepages_2m_total"] == 8 and d["gpus"] == []'
	d=$(cap qemu-noiommu)
	no_path "no NVIDIA GPU found" doctor --root "$d"
	expect_out "IOMMU: off"
	run doctor --root "$d" --json
	json_check '[(n["bdf"], n["driver"], n["iommu_group"], n["userspace"]["answer"]) for n in d["nvme"]] == [("0000:00:04.0", "uio_pci_generic", -1, "yes"), ("0000:00:05.0", "nvme", -1, "no")]'
	json_check 'd["system"]["iommu"] == "off" and d["system"]["vfio_pci"] == "yes" and d["system"]["uio_pci_generic"] == "yes" and d["system"]["vfio_noiommu"] != "yes"'
}

group_fixtures() {
	local d
	d=$(fx seed004)
	ok doctor --root "$d" || return
	expect_out "IOMMU: off"
	expect_out "NVIDIA GeForce RTX 3090"
	expect_out "path: root-complex (through pci0000:00)"
	expect_out "link-limited bandwidth: 7.88 GB/s (narrowest hop 0000:0b:00.0)"
	expect_out "Tier 1: yes"
	expect_out "Tier 2 (dma-buf + kernel module): no"
	expect_out "the gpunvme kernel module is not loaded"
	expect_out "Tier 3: no"
	expect_out "AMD root complex"
	expect_out "Tier 1 usable for 1 of 1 GPU x NVMe pair"

	d=$(fx seed004-d3)
	no_path "no GPU x NVMe pair can run Tier 1" doctor --root "$d"
	expect_out "Tier 1: no"
	expect_out "in D3hot"
	expect_out "fix: echo on | sudo tee /sys/bus/pci/devices/0000:0b:00.0/power/control"

	d=$(fx server-switch)
	ok doctor --root "$d" || return
	expect_out "path: switch (through 0000:01:00.0)"
	expect_out "[ACS 0x001d]"
	expect_out "ACS on bridge 0000:02:10.0"
	expect_out "Tier 1 usable for 1 of 2 GPU x NVMe pairs"
	expect_out "SAMSUNG MZVL21T0HCLR-00B00"
	# selecting the mounted boot disk: no direct path
	no_path "no GPU x NVMe pair can run Tier 1" doctor --root "$d" --nvme 05:00.0
	expect_out "in use (/dev/nvme0n1p2 on /)"
	expect_out "Tier 1 usable for 0 of 1 GPU x NVMe pair"
	ok doctor --root "$d" --gpu 0 --nvme 0000:04:00.0
	expect_out "Tier 1 usable for 1 of 1"

	d=$(fx h100-vm)
	no_path "no NVMe controller found" doctor --root "$d"
	expect_out "NVIDIA H100 80GB HBM3"
	expect_out "BAR1 128 GiB"

	d=$(fx no-nvidia)
	no_path "no NVIDIA GPU found" doctor --root "$d"
	expect_out "KIOXIA EXCERIA PLUS G3 SSD"
	expect_out "IOMMU: translated"

	d=$(fx broken)
	ok doctor --root "$d" || return
	expect_out "config space only 3 bytes"
	expect_out "memlock limit: unknown"
}

group_json() {
	local d
	d=$(fx seed004)
	ok doctor --json --root "$d" || return
	json_check 'd["system"]["iommu"] == "off" and d["system"]["dmabuf"] == "yes" and d["system"]["memlock"] == "unlimited"'
	json_check 'len(d["pairs"]) == 1 and d["pairs"][0]["tier1"]["answer"] == "yes" and d["tier1_pairs"] == 1'
	json_check 'd["pairs"][0]["tier2"]["answer"] == "no" and d["pairs"][0]["tier2"]["route"] == "dma-buf + kernel module"'
	json_check 'd["pairs"][0]["tier3"]["answer"] == "no" and any("AMD" in r["why"] for r in d["pairs"][0]["tier3"]["reasons"])'
	json_check 'abs(d["pairs"][0]["link_gbytes"] - 7.877) < 0.01 and d["pairs"][0]["path"] == "root-complex"'
	json_check 'd["gpus"][0]["bar1_bytes"] == 268435456 and d["nvme"][0]["driver"] == "vfio-pci"'

	d=$(fx seed004-d3)
	bad 1 "no GPU x NVMe pair" doctor --json --root "$d"
	json_check 'd["pairs"][0]["tier1"]["answer"] == "no" and d["nvme"][0]["power_state"] == "D3hot" and d["tier1_pairs"] == 0'

	d=$(fx server-switch)
	ok doctor -j --root "$d" || return
	json_check '[p["tier1"]["answer"] for p in d["pairs"]] == ["yes", "no"]'
	json_check '[p["tier2"]["answer"] for p in d["pairs"]] == ["no", "no"] and [p["tier3"]["answer"] for p in d["pairs"]] == ["no", "no"]'
	json_check 'd["pairs"][0]["acs_redirect"] and d["pairs"][0]["path"] == "switch" and d["pairs"][1]["path"] == "root-complex"'
	json_check 'd["system"]["iommu"] == "translated" and d["system"]["nvidia_open"] == "no" and d["system"]["memlock"] == 65536'
	json_check 'd["nvme"][1]["queues"] == 8 and d["nvme"][1]["max_transfer_kib"] == 512 and d["nvme"][1]["namespaces"] == 1'

	d=$(fx h100-vm)
	bad 1 "no NVMe controller" doctor --json --root "$d"
	json_check 'd["pairs"] == [] and len(d["gpus"]) == 1 and d["nvme"] == []'
	d=$(fx no-nvidia)
	bad 1 "no NVIDIA GPU" doctor --json --root "$d"
	json_check 'd["pairs"] == [] and d["gpus"] == [] and len(d["nvme"]) == 1'
	d=$(fx broken)
	ok doctor --json --root "$d" || return
	json_check 'd["system"]["memlock"] is None and d["system"]["dmabuf"] == "unknown" and d["nvme"][0]["link_gts"] == 0'
	# each controller's own verdict (the user-space driver can own it), GPU or not
	run doctor --json --root "$(fx seed004)"
	json_check 'd["nvme"][0]["userspace"] == {"answer": "yes", "reasons": []}'
	run doctor --json --root "$(fx seed004-d3)"
	json_check 'd["nvme"][0]["userspace"]["answer"] == "no" and "D3hot" in d["nvme"][0]["userspace"]["reasons"][0]["why"] and "CAP_PM+4.W=0x0008" in d["nvme"][0]["userspace"]["reasons"][0]["fix"]'
	run doctor --json --root "$(fx server-switch)"
	json_check '[n["userspace"]["answer"] for n in d["nvme"]] == ["yes", "no"] and "in use (/dev/nvme0n1p2 on /)" in d["nvme"][1]["userspace"]["reasons"][0]["why"]'
	run doctor --json --root "$(fx no-nvidia)"
	json_check 'd["nvme"][0]["userspace"]["answer"] == "no" and "vfio-bind.sh 0000:01:00.0" in d["nvme"][0]["userspace"]["reasons"][0]["fix"]'
	run doctor --root "$(fx no-nvidia)"
	expect_out "user-space driver (CPU path): no"
}

group_usage() {
	local d
	d=$(fx seed004)
	bad 2 "cannot be combined with --root" doctor --root "$d" --probe
	bad 2 "not a PCI address" doctor --root "$d" --nvme 0000:0b:00
	bad 2 "not a PCI address" doctor --nvme zz:00.0
	bad 2 "unknown option" doctor --bogus
	bad 2 "unexpected argument" doctor extra
	bad 2 "--gpu" doctor --gpu x
	bad 1 "there is 1 NVIDIA GPU" doctor --root "$d" --gpu 3
	bad 1 "no NVMe controller there" doctor --root "$d" --nvme 0000:0c:00.0
	bad 1 "doctor-capture.sh" doctor --root "$WORK/nonexistent"
	ok doctor --help && expect_out "usage: gpunvme doctor"
	ok help doctor && expect_out "--probe"
	# the machine itself: never a crash, exit 0 or 1
	run doctor
	[ "$RC" -le 1 ] || { fail "doctor on this machine exited $RC"; show; }
	# (--probe is not run here: on a machine with a bound controller it
	# would touch the device; it is for people, not for ctest)
}

group_capture() {
	local shells="sh" n sh d c
	command -v busybox >/dev/null 2>&1 && shells="$shells busybox"
	command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
	for sh in $shells; do
		for n in $FIXTURES; do
			d=$(fx "$n")
			c="$WORK/cap-$sh-$n"
			if [ "$sh" = busybox ]; then
				DOCTOR_CAPTURE_SRC=$d busybox sh "$CAPTURE" "$c" 2>"$WORK/cap.err"
			else
				DOCTOR_CAPTURE_SRC=$d sh "$CAPTURE" "$c" 2>"$WORK/cap.err"
			fi || { fail "$sh capture of $n failed"; cat "$WORK/cap.err" >&2; continue; }
			CHECKS=$((CHECKS + 1))
			run doctor --json --root "$d"
			cp "$OUT" "$WORK/a.json"
			run doctor --json --root "$c"
			cp "$OUT" "$WORK/b.json"
			if ! cmp -s "$WORK/a.json" "$WORK/b.json"; then
				fail "$sh capture of $n: doctor reads differently:"
				diff "$WORK/a.json" "$WORK/b.json" | head -20 >&2
			fi
			# every path the doctor touches in the fixture is in the
			# capture too (the script's list and the reader agree)
			"$MK" trace "$d" >"$WORK/trace" || fail "trace of $n"
			[ -s "$WORK/trace" ] || fail "trace of $n is empty"
			while IFS= read -r p; do
				rel=${p#"$d"/}
				if { [ -e "$d/$rel" ] || [ -L "$d/$rel" ]; } && ! { [ -e "$c/$rel" ] || [ -L "$c/$rel" ]; }; then
					fail "$sh capture of $n lacks $rel, which the doctor reads"
				fi
			done <"$WORK/trace"
			# the capture holds nothing the doctor does not read: no
			# file of the fixture's kinds beyond those the fixture has
			[ -L "$c/sys/bus/pci/devices/0000:00:03.1" ] || [ "$n" != seed004 ] ||
				fail "capture of $n: bus/pci/devices entries are not symlinks"
		done
	done
	# the fixture holds files the doctor does not read; the capture
	# leaves them out (the GPU's group type, hugepages of other sizes)
	[ -e "$WORK/cap-sh-server-switch/sys/kernel/iommu_groups/32/type" ] ||
		fail "capture lacks the NVMe's iommu_groups/32/type"
	[ -e "$WORK/cap-sh-server-switch/sys/kernel/mm/hugepages/hugepages-1048576kB" ] &&
		fail "capture copied 1 GiB hugepage counts, which the doctor does not read"
	# real sysfs: capture this machine, read it back
	if sh "$CAPTURE" "$WORK/self" 2>"$WORK/cap.err"; then
		run doctor --json --root "$WORK/self"
		[ "$RC" -le 1 ] || fail "doctor on the capture of this machine exited $RC"
	else
		fail "capturing this machine failed"
		cat "$WORK/cap.err" >&2
	fi
	bad_capture=$(sh "$CAPTURE" 2>&1 >/dev/null)
	case "$bad_capture" in *usage*) ;; *) fail "capture without OUTDIR: no usage line" ;; esac
}

case "$GROUP" in
fixtures | json | usage | capture | captured) "group_$GROUP" ;;
*) echo "unknown group $GROUP" >&2; exit 2 ;;
esac
echo "$GROUP: $CHECKS checks, $FAILS failed"
[ "$FAILS" -eq 0 ]
