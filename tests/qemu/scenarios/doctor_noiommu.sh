# SPDX-License-Identifier: BSD-2-Clause
# gpunvme doctor in a guest without an IOMMU (q35, intel_iommu=off):
#   0  bound to uio_pci_generic   doctor: user-space driver yes; probe_uio works
#   1  bound to nvme              doctor: no, the kernel owns it; probe_uio fails
# then the guest captured for tests/doctor/captures/qemu-noiommu.tgz (see
# doctor.sh for the console framing and why the BDFs are spliced in).
machine none
memory 512M
nvme_ctrl serial=gpunvme-n0 size=16M lbs=512
nvme_ctrl serial=gpunvme-n1 size=16M lbs=4096
plan <<'PLAN'
require_ctrls 2
hugepages 8
bind uio_pci_generic 0
bind nvme 1
timeout 120
xfail doctor.exit-1-without-gpu gpunvme_guest doctor
sh doctor.verdicts 'gpunvme_guest doctor > /tmp/d.txt; cat /tmp/d.txt; v() { awk -v b="$1" "f && /user-space driver/ { print; exit } \$1 == b { f = 1 }" /tmp/d.txt; }; v '"$BDF0"' | grep -q "user-space driver (CPU path): yes" && v '"$BDF1"' | grep -q "user-space driver (CPU path): no" && grep -q "IOMMU: off" /tmp/d.txt'
run doctor.uio-yes-achieved probe_uio $BDF0
sh doctor.kernel-owned-no-achieved '! probe_uio '"$BDF1"
sh doctor.capture 'sh /tests/doctor-capture.sh /tmp/cap > /dev/null && echo DOCTOR-CAPTURE-BEGIN && tar -c -C /tmp/cap . | gzip -c | base64 && echo DOCTOR-CAPTURE-END'
PLAN
