# SPDX-License-Identifier: BSD-2-Clause
# The driver (src/bus, src/ctrl, src/io) against QEMU's NVMe controller through
# vfio-pci behind QEMU's intel-iommu. Controller variants:
#   0  512-byte blocks, 4 I/O queue pairs
#   1  4096-byte blocks, MDTS 2 (16 KiB per command: forces splitting)
#   2  NVM subsystem with two namespaces (512 and 4096-byte blocks)
# Then cross-driver integrity with the kernel's nvme driver in both
# directions, and the same driver over uio_pci_generic (the IOMMU gives the
# kernel's devices an identity domain: iommu=pt).
# QEMU 7.2 completes a command whose DMA the IOMMU blocked with success (the
# data is dropped, the DMAR fault logged): the fault check therefore requires
# untouched memory, a logged DMAR fault and a working controller afterwards.
machine iommu
nvme_ctrl serial=gpunvme-a size=64M lbs=512 ioq=4
nvme_ctrl serial=gpunvme-b size=64M lbs=4096 mdts=2
nvme_subsys serial=gpunvme-c ns=32M:512 ns=32M:4096
plan <<'PLAN'
require_ctrls 3
bind vfio-pci all
timeout 300
run drv.vfio.a.selftest qemu_driver selftest vfio:$BDF0
run drv.vfio.b.selftest-mdts2 qemu_driver selftest vfio:$BDF1
run drv.vfio.c.selftest-2ns qemu_driver selftest vfio:$BDF2
run drv.vfio.a.iommu-fault qemu_driver iommu-fault vfio:$BDF0
dmesg_grep drv.vfio.a.dmar-fault-logged 'DMAR: .*[Ff]ault'
run drv.vfio.a.write qemu_driver write vfio:$BDF0 1 2048 512 11
run drv.vfio.b.write qemu_driver write vfio:$BDF1 1 2048 256 12
run drv.vfio.c2.write qemu_driver write vfio:$BDF2 2 16 32 13
sh pattern.a '/tests/qemu_driver pattern 11 1048576 262144 > /tmp/pa.bin'
sh pattern.b '/tests/qemu_driver pattern 12 8388608 1048576 > /tmp/pb.bin'
sh pattern.c '/tests/qemu_driver pattern 13 65536 131072 > /tmp/pc.bin'
sh pattern.k '/tests/qemu_driver pattern 21 4194304 196608 > /tmp/pk.bin'
bind nvme all
kcmp kernel.a.reads-driver-data $DISK0_1 1048576 /tmp/pa.bin
kcmp kernel.b.reads-driver-data $DISK1_1 8388608 /tmp/pb.bin
kcmp kernel.c2.reads-driver-data $DISK2_2 65536 /tmp/pc.bin
kwrite kernel.a.write $DISK0_1 4194304 /tmp/pk.bin
kwrite kernel.b.write $DISK1_1 4194304 /tmp/pk.bin
bind vfio-pci 0 1
run drv.vfio.a.reads-kernel-data qemu_driver verify vfio:$BDF0 1 8192 384 21
run drv.vfio.b.reads-kernel-data qemu_driver verify vfio:$BDF1 1 1024 48 21
hugepages 8
bind uio_pci_generic 2
run drv.uio.c2.reads-vfio-data qemu_driver verify uio:$BDF2 2 16 32 13
run drv.uio.c.selftest qemu_driver selftest uio:$BDF2
# last: they overwrite the first 16 MiB of the namespaces
run drv.vfio.a.randio qemu_driver randio vfio:$BDF0 1 5 48 16
run drv.vfio.b.randio-mdts2 qemu_driver randio vfio:$BDF1 1 6 64 64
PLAN
