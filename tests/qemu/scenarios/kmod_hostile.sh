# SPDX-License-Identifier: BSD-2-Clause
# The gpunvme module under hostile and careless use (issue 34), sourced by
# kmod_common.sh after its plan, so it runs in both IOMMU modes
# (kmod_iommu.sh, kmod_noiommu.sh). tests/qemu/kmod_fuzz.c makes raw
# ioctls (no library) and its NVMe commands through probe_common.c.
#   3  reads throttled to 2 MB/s: commands stay in flight long enough to
#      unmap, unbind or remove under them
nvme_ctrl serial=gpunvme-k3 size=64M lbs=512 read_mbps=2
# The fuzzer's time and seed: GPUNVME_KMOD_FUZZ_SECONDS (CI: 60; the
# 30-minute run: bench/kmod_fuzz_run.sh), GPUNVME_KMOD_FUZZ_SEED (0: a new
# seed, printed; give it back to replay a run).
KMOD_FUZZ_SECONDS=${GPUNVME_KMOD_FUZZ_SECONDS:-60}
KMOD_FUZZ_SEED=${GPUNVME_KMOD_FUZZ_SEED:-0}
# What the kernel prints when the module (or anything) breaks: oops=panic
# ends the guest on an oops; the rest only logs. Lockdep, KFENCE and page
# poisoning report only when the kernel has them on.
KMOD_KERNEL_BAD='Oops|BUG:|WARNING:|kernel BUG|general protection|refcount_t|KFENCE|possible circular locking|possible recursive locking|inconsistent lock state|UBSAN|list_(add|del) corruption|Poison overwritten|memory corruption|soft lockup|blocked for more than|Call Trace'
plan <<PLAN
echo "hostile use of the module: kmod_hostile.sh, fuzz $KMOD_FUZZ_SECONDS s, seed $KMOD_FUZZ_SEED"
sh kmod.hostile.dmar-before "kmsg_count() { cat /tmp/kmsg.boot /tmp/kmsg.log | grep -cE 'DMAR: .*[Ff]ault'; }; kmsg_count > /tmp/dmar.before; echo DMAR faults so far: \\\$(cat /tmp/dmar.before)"
hugepages 16
timeout 120
run kmod.mmap-bounds kmod_fuzz mmap-bounds \$BDF0
run kmod.two-openers kmod_fuzz two-openers \$BDF0
run kmod.rmmod-while-open kmod_fuzz rmmod-open \$BDF0
sh kmod.still-loaded "test -d /sys/module/gpunvme && test -c /dev/gpunvme/\$BDF0"
run kmod.memlock-nobody kmod_fuzz memlock \$BDF0
run kmod.fault-stall kmod_fuzz fault-stall \$BDF0
run kmod.unmap-inflight kmod_fuzz unmap-inflight \$BDF3
run kmod.unbind-inflight kmod_fuzz unbind-inflight \$BDF3
bind gpunvme 3
run kmod.mmap-unbind kmod_fuzz mmap-unbind \$BDF3
bind gpunvme 3
run kmod.remove-inflight kmod_fuzz remove-inflight \$BDF3
sh kmod.rescan 'echo 1 > /sys/bus/pci/rescan'
bind gpunvme 3
run kmod.after-remove.two-openers kmod_fuzz two-openers \$BDF3
run kmod.after-remove.unmap-inflight kmod_fuzz unmap-inflight \$BDF3
timeout $((KMOD_FUZZ_SECONDS + 120))
run kmod.fuzz kmod_fuzz fuzz \$BDF0 --seconds $KMOD_FUZZ_SECONDS --seed $KMOD_FUZZ_SEED --threads 4 --peer $PEER
timeout 300
run kmod.fuzz.after-selftest qemu_driver selftest kmod:\$BDF0
sh kmod.hostile.no-dmar-fault "n=\\\$(cat /tmp/kmsg.boot /tmp/kmsg.log | grep -cE 'DMAR: .*[Ff]ault'); echo DMAR faults: \\\$(cat /tmp/dmar.before) before, \\\$n after; test \\\$n -eq \\\$(cat /tmp/dmar.before)"
sh kmod.kernel-log-clean "! cat /tmp/kmsg.boot /tmp/kmsg.log | grep -E '$KMOD_KERNEL_BAD'"
PLAN
