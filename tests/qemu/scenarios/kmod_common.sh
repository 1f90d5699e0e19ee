# SPDX-License-Identifier: BSD-2-Clause
# Shared by kmod_iommu.sh and kmod_noiommu.sh (sourced after `machine`): the
# gpunvme kernel module (built on the host against this guest kernel's
# headers: GPUNVME_KMOD_KO) owns QEMU's NVMe controllers; vgem exports
# dma-bufs; an ivshmem-plain device at 00:10.0 stands in for GPU BAR1, its
# 4 MiB BAR2 backed by $WORK/ivshmem.bin on the host.
#   0  512-byte blocks, 4 I/O queue pairs
#   1  4096-byte blocks, MDTS 2 (16 KiB per command: splits, PRP lists)
[ -n "${GPUNVME_KMOD_KO:-}" ] && [ -f "$GPUNVME_KMOD_KO" ] ||
	skip "no gpunvme.ko for the guest kernel (GPUNVME_KMOD_KO; ctest runs kmod.build first)"
memory 1G
# a kernel oops ends the run at once instead of at the time limit
# (no_timer_check, once here, is on every scenario's command line: run.sh)
append oops=panic
# The kernel's debugging that Debian's kernels allow from the command line,
# so that a fault in the module is seen (docs/hardware.md lists what each of
# Debian 12's kernels has; neither has lockdep, KASAN or DMA-API debugging):
#   slub_debug=FZP   slab sanity checks, red zones and poisoning
#                    (CONFIG_SLUB_DEBUG): overruns and use after free of
#                    kmalloc'ed memory are reported at free / validation
#   page_poison=1    freed pages are poisoned and checked when handed out
#                    again (CONFIG_PAGE_POISONING): a write into a page after
#                    it was freed (the controller's DMA into an unpinned
#                    page) is reported "pagealloc: memory corruption"; it
#                    takes precedence over init_on_free, which is left off
#   kfence.sample_interval=1  KFENCE (6.12's config has it, sample
#                    interval 0: off unless given): one allocation per ms
#                    placed between guard pages
#   panic_on_warn=1  a WARN (and a KFENCE report) ends the run there
#   panic_print=0x20 the panic replays the whole kernel log on the console
#                    (guest.sh keeps the console at emergencies only)
# and, at the end of each scenario, kmod_check_dmesg (below).
KCONFIG=$CACHE/kernel/boot/config-$(cat "$CACHE/kernel.version" 2>/dev/null)
kconfig_has() { [ ! -f "$KCONFIG" ] || grep -qs "^$1=y" "$KCONFIG"; } # unknown config: assume yes
kconfig_has CONFIG_SLUB_DEBUG && append slub_debug=FZP
kconfig_has CONFIG_PAGE_POISONING && append page_poison=1
[ -f "$KCONFIG" ] && grep -qs '^CONFIG_KFENCE=y' "$KCONFIG" && append kfence.sample_interval=1
append panic_on_warn=1 panic_print=0x20
# kmod_check_dmesg [NAME]: the oracle every kmod scenario (and the raw-ioctl
# fuzzer) ends with: a check (default name kmod.dmesg-clean) that the guest's
# kernel log since boot has no kernel report (oops, BUG, WARN, KFENCE, slub /
# page-poison corruption, lockdep, RCU stall, hung task, general protection
# fault, refcount_t, list corruption) and no taint that one leaves: the plan
# command dmesg_clean of tests/qemu/guest.sh. Call it after the scenario's
# last plan step.
kmod_check_dmesg() { plan <<<"dmesg_clean ${1:-kmod.dmesg-clean}"; }
modules vgem
guest_file "$GPUNVME_KMOD_KO:/lib/modules/extra/gpunvme.ko"
ivshmem 4M
nvme_ctrl serial=gpunvme-k0 size=64M lbs=512 ioq=4
nvme_ctrl serial=gpunvme-k1 size=64M lbs=4096 mdts=2
#   2  the loader fixture: ext4 (4 KiB blocks) holding fragmented model files
command -v zstd >/dev/null 2>&1 || skip "zstd not installed (the loader fixture is compressed)"
zstd -dqf "$ROOT/tests/loader/fixtures/ext4-4k.img.zst" -o "$WORK/model-ext4.img"
zstd -dqf "$ROOT/tests/loader/fixtures/ext4-4k.manifest.zst" -o "$WORK/model-ext4.manifest"
nvme_ctrl serial=gpunvme-k2 image="$WORK/model-ext4.img" size=64M lbs=512
PEER=0000:00:10.0
plan <<PLAN
require_ctrls 3
sh kmod.insmod 'insmod /lib/modules/extra/gpunvme.ko'
sh peer.enable 'echo 1 > /sys/bus/pci/devices/$PEER/enable'
bind gpunvme all
sh kmod.devnodes "test -c /dev/gpunvme/\$BDF0 && test -c /dev/gpunvme/\$BDF1"
timeout 300
run drv.kmod.a.selftest qemu_driver selftest kmod:\$BDF0
run drv.kmod.b.selftest-mdts2 qemu_driver selftest kmod:\$BDF1
run drv.kmod.pci-dispatch qemu_driver write pci:\$BDF0 1 0 8 50
run drv.kmod.a.write qemu_driver write kmod:\$BDF0 1 2048 1024 51
run drv.kmod.b.write qemu_driver write kmod:\$BDF1 1 256 512 52
run drv.kmod.a.verify qemu_driver verify kmod:\$BDF0 1 2048 1024 51
run kmod.errors kmod_test errors kmod:\$BDF0 $PEER
run kmod.pin-limit kmod_test pinlimit kmod:\$BDF0
run kmod.vgem.a kmod_test vgem kmod:\$BDF0 1 2048 1024 51
run kmod.vgem.b-mdts2 kmod_test vgem kmod:\$BDF1 1 256 512 52
run kmod.peer.a kmod_test peer kmod:\$BDF0 1 2048 1024 51 $PEER 2 0x100000
run kmod.peer.b-mdts2 kmod_test peer kmod:\$BDF1 1 256 256 52 $PEER 2 0x200000
run kmod.tier3.a kmod_test tier3 kmod:\$BDF0 1 2048 1024 51 $PEER 2 0x0
run kmod.kill.a kmod_test kill kmod:\$BDF0 1 64
run kmod.unbind-while-owned kmod_test unbind kmod:\$BDF1
sh load.kmod.small-safetensors "gpunvme_guest load kmod:\$BDF2 /models/small.safetensors --tier cpu --verify --json --no-progress > /tmp/load.json; rc=\\\$?; echo KMOD-LOAD-JSON-BEGIN; cat /tmp/load.json; echo; echo KMOD-LOAD-JSON-END; exit \\\$rc"
sh kmod.rmmod 'rmmod gpunvme'
sh kmod.unbound "test ! -e /sys/bus/pci/devices/\$BDF0/driver"
sh kmod.reinsmod 'insmod /lib/modules/extra/gpunvme.ko'
bind gpunvme all
run drv.kmod.a.after-kill qemu_driver verify kmod:\$BDF0 1 2048 1024 51
run drv.kmod.a.selftest-after-reload qemu_driver selftest kmod:\$BDF0
PLAN
# The reads into the BAR, checked from the host: the controller's DMA landed
# in the file behind ivshmem-plain (peer.a at 1 MiB: 512 KiB of seed 51 from
# byte 2048*512; peer.b at 2 MiB: 1 MiB of seed 52 from byte 256*4096).
host_check <<'HOST'
check() {  # check NAME FILE_OFFSET BYTES SEED START
	"$BIN_qemu_driver" pattern "$4" "$5" "$3" > "$WORK/want.bin"
	dd if="$WORK/ivshmem.bin" of="$WORK/got.bin" bs=4096 skip=$(($2 / 4096)) count=$(($3 / 4096)) status=none
	if cmp -s "$WORK/want.bin" "$WORK/got.bin"; then
		echo "PASS $1: $3 bytes at 0x$(printf %x "$2") of ivshmem.bin hold the pattern (md5 $(md5sum < "$WORK/got.bin" | cut -c1-32))"
	else
		echo "FAIL $1: ivshmem.bin at 0x$(printf %x "$2") differs from the pattern"; cmp "$WORK/want.bin" "$WORK/got.bin" | head -n 2; return 1
	fi
}
check host.peer.a 1048576 524288 51 1048576
check host.peer.b 2097152 1048576 52 1048576
# The loader over kmod: (CPU tier, ext4 extents): every tensor's sha256 in
# its --json output against the fixture's manifest (an independent reader).
sed -n '/^KMOD-LOAD-JSON-BEGIN/,/^KMOD-LOAD-JSON-END/p' "$WORK/serial.log" | sed '1d;$d' > "$WORK/load.json"
python3 - "$WORK/load.json" "$WORK/model-ext4.manifest" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = [l.rstrip("\n").split("\t") for l in open(sys.argv[2], encoding="utf-8")]
want = [w for w in want if w[0] == "/models/small.safetensors"]
got = {t["name"]: t for t in d["tensors"]}
bad = [w[1] for w in want if w[1] not in got or got[w[1]]["sha256"] != w[6] or got[w[1]]["bytes"] != int(w[5])]
if bad or len(got) != len(want) or d.get("tier") != "cpu" or not d.get("verified"):
    print("FAIL host.load: %d tensors, %d expected, %d differ (%s), tier %r, verified %r" %
          (len(got), len(want), len(bad), bad[:3], d.get("tier"), d.get("verified")))
    sys.exit(1)
print("PASS host.load: %d tensors of /models/small.safetensors loaded over %s match the manifest's sha256" %
      (len(want), d.get("uri")))
PY
HOST
# shellcheck source=kmod_hostile.sh
. "$(dirname "${BASH_SOURCE[0]}")/kmod_hostile.sh"
