# SPDX-License-Identifier: BSD-2-Clause
# uio_pci_generic without an IOMMU: bus addresses are physical addresses of
# huge pages. Two controllers: 512-byte blocks with 4 I/O queue pairs, and
# 4096-byte blocks with MDTS 2. Data written by the user-space driver is read
# by the kernel nvme driver and the reverse.
machine none
memory 512M
nvme_ctrl serial=gpunvme-u0 size=64M lbs=512 ioq=4
nvme_ctrl serial=gpunvme-u1 size=64M lbs=4096 mdts=2
plan <<'PLAN'
require_ctrls 2
hugepages 8
bind uio_pci_generic all
stop_on_fail
timeout 120
run uio.a.write probe_uio $BDF0 --write 1048576 262144 /tmp/a.bin
run uio.b.write-mdts probe_uio $BDF1 --write 4096 1048576 /tmp/b.bin
mkrand /tmp/k.bin 131072
bind nvme all
kcmp kernel.a.reads-uio-data $DISK0_1 1048576 /tmp/a.bin
kcmp kernel.b.reads-uio-data $DISK1_1 4096 /tmp/b.bin
kwrite kernel.a.write $DISK0_1 4194304 /tmp/k.bin
kwrite kernel.b.write $DISK1_1 4194304 /tmp/k.bin
bind uio_pci_generic all
run uio.a.reads-kernel-data probe_uio $BDF0 --verify 4194304 /tmp/k.bin
run uio.b.reads-kernel-data probe_uio $BDF1 --verify 4194304 /tmp/k.bin
PLAN
