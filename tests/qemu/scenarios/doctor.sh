# SPDX-License-Identifier: BSD-2-Clause
# gpunvme doctor in the guest, checked against what the driver then does.
# q35 with intel-iommu (intel_iommu=on iommu=pt: translated domains for
# VFIO, identity for the kernel's drivers, so uio_pci_generic works too):
#   0  bound to vfio-pci          doctor: user-space driver yes; probe_vfio works
#   1  bound to uio_pci_generic   doctor: yes (identity domain);  probe_uio works
#   2  bound to nvme              doctor: no, the kernel owns it; probe_vfio fails
# (The plan line is eval'ed: the BDFs are spliced in outside the single
# quotes, since the shell code runs in a child that does not see them.)
# No GPU in the guest: doctor exits 1 ("no NVIDIA GPU found"). Finally the
# guest is captured (scripts/doctor-capture.sh under busybox sh) and printed
# between DOCTOR-CAPTURE-BEGIN/END as base64 of a gzip'ed tar: the fixture
# tests/doctor/captures/qemu-iommu.tgz comes from there.
machine iommu
memory 512M
nvme_ctrl serial=gpunvme-d0 size=16M lbs=512
nvme_ctrl serial=gpunvme-d1 size=16M lbs=4096
nvme_ctrl serial=gpunvme-d2 size=16M lbs=512
plan <<'PLAN'
require_ctrls 3
hugepages 8
bind vfio-pci 0
bind uio_pci_generic 1
bind nvme 2
timeout 120
xfail doctor.exit-1-without-gpu gpunvme_guest doctor
sh doctor.verdicts 'gpunvme_guest doctor > /tmp/d.txt; cat /tmp/d.txt; v() { awk -v b="$1" "f && /user-space driver/ { print; exit } \$1 == b { f = 1 }" /tmp/d.txt; }; v '"$BDF0"' | grep -q "user-space driver (CPU path): yes" && v '"$BDF1"' | grep -q "user-space driver (CPU path): yes" && v '"$BDF2"' | grep -q "user-space driver (CPU path): no" && grep -q "is bound to nvme: the kernel owns it" /tmp/d.txt && grep -q "IOMMU: " /tmp/d.txt'
sh doctor.json 'gpunvme_guest doctor --json > /tmp/d.json; grep -q "\"userspace\"" /tmp/d.json && grep -q "\"tier1_pairs\": 0" /tmp/d.json'
run doctor.vfio-yes-achieved probe_vfio $BDF0
run doctor.uio-yes-achieved probe_uio $BDF1
xfail doctor.kernel-owned-no-achieved probe_vfio $BDF2
sh doctor.capture 'sh /tests/doctor-capture.sh /tmp/cap > /dev/null && echo DOCTOR-CAPTURE-BEGIN && tar -c -C /tmp/cap . | gzip -c | base64 && echo DOCTOR-CAPTURE-END'
PLAN
