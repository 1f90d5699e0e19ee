# SPDX-License-Identifier: BSD-2-Clause
# VFIO with QEMU's intel-iommu (translating for VFIO, identity for the
# kernel's own drivers: intel_iommu=on iommu=pt). Three controllers:
#   0  512-byte blocks, 4 I/O queue pairs
#   1  4096-byte blocks, MDTS 2 (16 KiB per command)
#   2  NVM subsystem, namespace 1 (512-byte blocks) and 2 (4096-byte blocks)
# Plan: user-space driver writes through VFIO, the kernel nvme driver reads
# it back; the kernel writes, the user-space driver reads; DMA to unmapped
# IOVAs must be stopped by the IOMMU; finally uio_pci_generic reads data
# written through VFIO. Binaries: probe_vfio, probe_uio.
machine iommu
nvme_ctrl serial=gpunvme-a size=64M lbs=512 ioq=4
nvme_ctrl serial=gpunvme-b size=64M lbs=4096 mdts=2
nvme_subsys serial=gpunvme-c ns=32M:512 ns=32M:4096
plan <<'PLAN'
require_ctrls 3
bind vfio-pci all
stop_on_fail
timeout 120
run vfio.a.identify probe_vfio $BDF0
run vfio.a.unmapped-iova probe_vfio $BDF0 --fault
dmesg_grep vfio.a.dmar-fault-logged 'DMAR: .*[Ff]ault'
run vfio.a.write probe_vfio $BDF0 --write 1048576 262144 /tmp/a.bin
run vfio.b.write-mdts probe_vfio $BDF1 --write 8388608 1048576 /tmp/b.bin
run vfio.c.write-ns2 probe_vfio $BDF2 --nsid 2 --write 65536 131072 /tmp/c2.bin --nsid 1 --write 0 4096 /tmp/c1.bin
mkrand /tmp/k.bin 196608
bind nvme all
kcmp kernel.a.reads-vfio-data $DISK0_1 1048576 /tmp/a.bin
kcmp kernel.b.reads-vfio-data $DISK1_1 8388608 /tmp/b.bin
kcmp kernel.c.ns2.reads-vfio-data $DISK2_2 65536 /tmp/c2.bin
kcmp kernel.c.ns1.reads-vfio-data $DISK2_1 0 /tmp/c1.bin
kwrite kernel.a.write $DISK0_1 2097152 /tmp/k.bin
kwrite kernel.b.write $DISK1_1 2097152 /tmp/k.bin
bind vfio-pci 0 1
run vfio.a.reads-kernel-data probe_vfio $BDF0 --verify 2097152 /tmp/k.bin
run vfio.b.reads-kernel-data probe_vfio $BDF1 --verify 2097152 /tmp/k.bin
# uio_pci_generic next to the IOMMU: works because iommu=pt gives the
# device an identity domain (bus address = physical address).
hugepages 4
bind uio_pci_generic 2
run uio.c.ns2.reads-vfio-data probe_uio $BDF2 --nsid 2 --verify 65536 /tmp/c2.bin
PLAN
