# SPDX-License-Identifier: BSD-2-Clause
# A controller reset with 16 reads of 512 KiB in flight, through vfio-pci
# behind intel-iommu: every read ended, the buffers of the failed ones
# untouched 50 ms after the reset; the controller works afterwards
# (everything written again and read back).
# A VM of its own: before the reset deleted the I/O queues first (as Linux
# does), Debian's QEMU 7.2 died (SIGSEGV) inside this reset, twice in a row
# on a CI host (2026-11-28) and in 6 of 30 runs here with two VMs at once
# (tests/qemu/README.md); a crash here now means the reset no longer stops
# the queues' commands before CC.EN = 0, and fails like any other.
machine iommu
nvme_ctrl serial=gpunvme-rr size=64M lbs=4096 ioq=2
plan <<'PLAN'
require_ctrls 1
bind vfio-pci all
timeout 300
run drv.vfio.recovery-reads qemu_driver recovery-reads vfio:$BDF0 1 51
PLAN
