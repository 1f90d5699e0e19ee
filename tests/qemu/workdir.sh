# SPDX-License-Identifier: BSD-2-Clause
# Sourced by tests/qemu/run.sh and nvmet_host.sh (bash).
#
# claim_workdir: the work directory in $WORK for this run alone. ctest gives
# each test a fixed one (build/tests/qemu/work/<name>), and a build tree is
# shared: two runs of the same test at once (two people's ctest in one
# build/, or `ctest -L qemu` next to `ctest -L tcp`, both holding qemu.nvmet)
# deleted each other's disks and serial log, and each then judged the other
# guest's log (qemu.nvmet failed so on a busy machine). The first run holds
# an exclusive lock on WORK.lock (fd 9, inherited by QEMU, so it lasts as
# long as any of the run's processes); a run that finds it held works in a
# fresh sibling, WORK.XXXXXX, and sets WORK_PRIVATE=1 (its caller removes
# that directory after a pass). The lock is taken without waiting: a run
# that waited for another would spend its own time limit doing so.
claim_workdir() {
	WORK_PRIVATE=0
	mkdir -p "$(dirname "$WORK")"
	exec 9>>"$WORK.lock"
	if ! flock -n 9; then
		WORK=$(mktemp -d "$WORK.XXXXXX")
		WORK_PRIVATE=1
		echo "qemu: another run uses this test's work directory now; this one works in $WORK"
	fi
}
