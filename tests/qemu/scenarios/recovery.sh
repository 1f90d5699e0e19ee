# SPDX-License-Identifier: BSD-2-Clause
# Recovery against QEMU's NVMe controller through vfio-pci (intel-iommu):
# what can be provoked there. Real timeouts (a 1 ms queue pair timeout
# against TCG's latency) and the abort step (QEMU answers "not aborted" and
# completes the commands late); controller resets with writes and with reads
# in flight: acknowledged writes present, every block old or new and whole,
# buffers of failed reads untouched after the reset; the controller works
# afterwards. (Dropped commands, CFS and removal cannot be provoked in
# QEMU's controller: the emulator's soak covers them.)
machine iommu
nvme_ctrl serial=gpunvme-r size=64M lbs=4096 ioq=2
plan <<'PLAN'
require_ctrls 1
bind vfio-pci all
timeout 300
run drv.vfio.recovery qemu_driver recovery vfio:$BDF0 1 31
PLAN
