# SPDX-License-Identifier: BSD-2-Clause
# The driver over uio_pci_generic on a machine without an IOMMU (bus
# addresses = physical addresses of huge pages), against QEMU's controller
# with 512 and 4096-byte blocks and MDTS 2; cross-driver checks both ways.
machine none
memory 512M
nvme_ctrl serial=gpunvme-u0 size=64M lbs=512 ioq=4
nvme_ctrl serial=gpunvme-u1 size=64M lbs=4096 mdts=2
plan <<'PLAN'
require_ctrls 2
hugepages 32
bind uio_pci_generic all
timeout 300
run drv.uio.a.selftest qemu_driver selftest uio:$BDF0
run drv.uio.b.selftest-mdts2 qemu_driver selftest pci:$BDF1
run drv.uio.a.write qemu_driver write uio:$BDF0 1 2048 512 31
run drv.uio.b.write qemu_driver write uio:$BDF1 1 256 256 32
sh pattern.a '/tests/qemu_driver pattern 31 1048576 262144 > /tmp/pa.bin'
sh pattern.b '/tests/qemu_driver pattern 32 1048576 1048576 > /tmp/pb.bin'
sh pattern.k '/tests/qemu_driver pattern 41 4194304 131072 > /tmp/pk.bin'
bind nvme all
kcmp kernel.a.reads-driver-data $DISK0_1 1048576 /tmp/pa.bin
kcmp kernel.b.reads-driver-data $DISK1_1 1048576 /tmp/pb.bin
kwrite kernel.a.write $DISK0_1 4194304 /tmp/pk.bin
kwrite kernel.b.write $DISK1_1 4194304 /tmp/pk.bin
bind uio_pci_generic all
run drv.uio.a.reads-kernel-data qemu_driver verify uio:$BDF0 1 8192 256 41
run drv.uio.b.reads-kernel-data qemu_driver verify uio:$BDF1 1 1024 32 41
# last: it overwrites the first 16 MiB of the namespace
run drv.uio.b.randio-mdts2 qemu_driver randio uio:$BDF1 1 7 64 64
# buffers of several 2 MiB hugepages: PRPs through the DMA registry's
# per-hugepage address table (physical pages are not contiguous)
run drv.uio.a.randio-hugepages qemu_driver randio uio:$BDF0 1 8 32 16
PLAN
