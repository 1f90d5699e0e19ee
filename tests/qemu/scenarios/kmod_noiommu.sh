# SPDX-License-Identifier: BSD-2-Clause
# The gpunvme kernel module on a machine without an IOMMU: bus addresses are
# physical (the DMA API's direct mapping), the vgem buffer's pages are
# scattered, so PRPs come from the 4 KiB table; the peer BAR's bus address
# is its physical address. See kmod_common.sh.
machine none
# shellcheck source=kmod_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/kmod_common.sh"
plan <<'PLAN'
dmesg_grep kmod.no-iommu 'gpunvme .*IOMMU off or passthrough'
PLAN
kmod_check_dmesg
