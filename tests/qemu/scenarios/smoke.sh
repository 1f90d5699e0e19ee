# SPDX-License-Identifier: BSD-2-Clause
# Smallest scenario: boot, find one controller, bind it to each driver.
machine iommu
nvme_ctrl size=16M
plan <<'PLAN'
require_ctrls 1
bind vfio-pci 0
bind uio_pci_generic 0
bind nvme 0
kmd5 kernel.md5 $DISK0_1 0 65536
PLAN
