# SPDX-License-Identifier: BSD-2-Clause
# The gpunvme kernel module with intel-iommu translating for every device
# (iommu.passthrough=0): all bus addresses come from the DMA API's IOVA
# allocator, the peer BAR is reached through an IOMMU mapping
# (dma_map_resource), and an address nobody mapped faults (DMAR) and never
# lands. See kmod_common.sh for the rest.
machine iommu-dma
# shellcheck source=kmod_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/kmod_common.sh"
plan <<'PLAN'
run drv.kmod.a.iommu-fault qemu_driver iommu-fault kmod:$BDF0
dmesg_grep drv.kmod.a.dmar-fault-logged 'DMAR: .*[Ff]ault'
dmesg_grep kmod.iommu-translates 'gpunvme .*IOMMU translating'
PLAN
kmod_check_dmesg
