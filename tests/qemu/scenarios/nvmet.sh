# SPDX-License-Identifier: BSD-2-Clause
# Linux's NVMe/TCP target in the guest, our host outside it (issue 18):
# nvmet + nvmet-tcp configured through configfs export three of QEMU's NVMe
# namespaces (seen by the guest's nvme driver) as subsystem
# nqn.2026-11.io.gpunvme:qemu on port 4420, which QEMU's user networking
# forwards to 127.0.0.1:$NVMET_HOSTPORT on the host. Driven by
# tests/qemu/nvmet_host.sh, which sets NVMET_HOSTPORT and NVMET_IMAGE (an
# ext4 image holding a model) and runs the host's side while the guest waits
# for its steps (GPUNVME-STEP-N written by the host to namespace 3).
#   ns 1  the ext4 image (extents, load --verify, 8 clients, the kill)
#   ns 2  scratch: data both ways, randio, the benchmark
#   ns 3  the host -> guest step mailbox
: "${NVMET_HOSTPORT:?set by tests/qemu/nvmet_host.sh}" "${NVMET_IMAGE:?set by tests/qemu/nvmet_host.sh}"
machine none
memory 1G
nvme_ctrl serial=gpunvme-t0 image=$NVMET_IMAGE size=0 lbs=512
nvme_ctrl serial=gpunvme-t1 size=256M lbs=512
nvme_ctrl serial=gpunvme-t2 size=16M lbs=512
netfwd "$NVMET_HOSTPORT" 4420
modules configfs nvmet nvmet_tcp nvme_fabrics nvme_tcp virtio_pci virtio_net
plan <<'PLAN'
require_ctrls 3
bind nvme all
sh net '/tests/nvmet_guest.sh net'
sh pattern.guest '/tests/qemu_driver pattern 51 134217728 1048576 > /tmp/pg.bin'
sh pattern.host '/tests/qemu_driver pattern 52 201326592 1048576 > /tmp/ph.bin'
kwrite guest.writes-for-host $DISK1_1 134217728 /tmp/pg.bin
sh nvmet.export "/tests/nvmet_guest.sh export $DISK0_1 $DISK1_1 $DISK2_1"
stop_on_fail
timeout 300
# our host inside the guest too, over its loopback
run guest.ours.randio qemu_driver randio tcp://127.0.0.1:4420/nqn.2026-11.io.gpunvme:qemu 2 5 48 8
echo QEMU-DATA nvmet ready
timeout 1200
sh wait.host-step1 "/tests/nvmet_guest.sh wait_step 1 $DISK2_1 1100"
kcmp guest.reads-host-data $DISK1_1 201326592 /tmp/ph.bin
timeout 400
sh bench.1 '/tests/nvmet_guest.sh bench 2 5'
sh bench.2 '/tests/nvmet_guest.sh bench 2 5'
echo QEMU-DATA nvmet bench done
timeout 700
sh wait.host-step2 "/tests/nvmet_guest.sh wait_step 2 $DISK2_1 600"
sh kill.target 'usleep 300000; /tests/nvmet_guest.sh unexport'
echo QEMU-DATA nvmet target killed
PLAN
