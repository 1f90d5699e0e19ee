# SPDX-License-Identifier: BSD-2-Clause
# Recovery against QEMU's NVMe controller through vfio-pci (intel-iommu):
# what can be provoked there. Real timeouts (a 1 ms queue pair timeout; the
# drive's reads throttled to 200 MB/s, so a 512 KiB read takes 2.6 ms) and
# the abort step (QEMU answers "not aborted" and
# completes the commands late); a controller reset with writes in flight:
# acknowledged writes present, every block old or new and whole; the
# controller works afterwards. (The reset with reads in flight has a VM of
# its own: recovery_reads. Dropped commands, CFS and removal cannot be
# provoked in QEMU's controller: the emulator's soak covers them.)
# Two controllers: QEMU 7.2 crashed (SIGSEGV) in about 1 of 10 runs when a
# controller was reset with throttled reads queued in its block layer, so
# the reset runs on a controller without throttling.
machine iommu
nvme_ctrl serial=gpunvme-r size=64M lbs=4096 ioq=2 read_mbps=200
nvme_ctrl serial=gpunvme-s size=64M lbs=4096 ioq=2
plan <<'PLAN'
require_ctrls 2
bind vfio-pci all
timeout 300
run drv.vfio.recovery-timeouts qemu_driver recovery-timeouts vfio:$BDF0 1 31
run drv.vfio.recovery-writes qemu_driver recovery-writes vfio:$BDF1 1 41
PLAN
