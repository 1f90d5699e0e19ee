# SPDX-License-Identifier: BSD-2-Clause
# The combination matrix's "QEMU vfio" column (python/tests/test_matrix.py,
# issue 31): QEMU's controller bound to vfio-pci behind intel-iommu, its
# namespace an ext4 file system (mkfs.ext4 -d on the host, 4 KiB blocks, the
# controller's blocks 512 bytes) holding the matrix's source model
# (gpunvme-mkmodel --format safetensors --size 4M --seed 31, as
# test_matrix.py writes it). matrix_guest.sh runs every entry point the
# guest has (the CLI's cat and load --verify, the C layer stream) and prints
# a line for every entry point x tier (ran / refused with its reason /
# failed); matrix_table.py checks them on the host (every tensor's sha256
# of load --json against the source) and prints the table.
# GPUNVME_MKMODEL: the host's gpunvme-mkmodel (ctest sets it).
machine iommu
MKMODEL=${GPUNVME_MKMODEL:-$ROOT/build/bin/gpunvme-mkmodel}
[ -x "$MKMODEL" ] || { log "no gpunvme-mkmodel at $MKMODEL (set GPUNVME_MKMODEL)" >&2; exit 1; }
MKFS=$(command -v mkfs.ext4 || echo /sbin/mkfs.ext4)
[ -x "$MKFS" ] || skip "mkfs.ext4 (e2fsprogs) not installed"
command -v python3 >/dev/null 2>&1 || skip "python3 not installed (the host's half of the check)"
rm -rf "$WORK/matrix-root"
mkdir -p "$WORK/matrix-root/m"
"$MKMODEL" --format safetensors --size 4M --seed 31 -o "$WORK/matrix-root/m/model.safetensors" > /dev/null
"$MKFS" -q -F -b 4096 -d "$WORK/matrix-root" "$WORK/matrix-ext4.img" 24M > /dev/null 2>&1
nvme_ctrl serial=gpunvme-m image="$WORK/matrix-ext4.img" lbs=512
guest_file "$WORK/matrix-root/m/model.safetensors:/src/model.safetensors"
plan <<'PLAN'
require_ctrls 1
bind vfio-pci 0
timeout 300
run matrix.vfio matrix_guest.sh vfio:$BDF0 /m/model.safetensors /src/model.safetensors
PLAN
host_check <<'EOF'
python3 "$ROOT/tests/qemu/matrix_table.py" "$WORK/serial.log" "$WORK/matrix-root/m/model.safetensors"
EOF
