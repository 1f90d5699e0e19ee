# SPDX-License-Identifier: BSD-2-Clause
# Checks shared by the command-line test scripts (tests/cli/cli_test.sh,
# tests/loader/load_test.sh), sourced after they set:
#   BIN        the gpunvme binary        T      timeout per command (s)
#   OUT, ERR   files for stdout/stderr   FAILS, CHECKS  counters (0)
#   FAIL_TAG   optional tag in failure lines (the group)
#   BAD_GREP   -F (bad's pattern is a fixed phrase, default) or -E (a regex)
# Every command runs under `timeout`; a hang, a signal or a sanitizer report
# is always a failure.

fail() {
	echo "FAIL${FAIL_TAG:+ [$FAIL_TAG]}: $*" >&2
	FAILS=$((FAILS + 1))
}

show() {
	echo "---- stdout (head):" >&2
	head -c 2000 "$OUT" >&2
	echo "---- stderr (head):" >&2
	head -c 2000 "$ERR" >&2
	echo "----" >&2
}

# run_cmd CMD ARGS...: sets RC; stdout in $OUT, stderr in $ERR
run_cmd() {
	timeout -k 5 "$T" "$@" >"$OUT" 2>"$ERR"
	RC=$?
	CHECKS=$((CHECKS + 1))
	if [ $RC -eq 124 ] || [ $RC -eq 137 ]; then
		fail "hang (timeout ${T}s): $*"
		return 1
	fi
	if [ $RC -ge 128 ]; then
		fail "crash (signal $((RC - 128))): $*"
		show
		return 1
	fi
	if grep -qE 'Sanitizer|runtime error:' "$ERR"; then
		fail "sanitizer report: $*"
		show
		return 1
	fi
	return 0
}

# run ARGS...: the gpunvme binary
run() { run_cmd "$BIN" "$@"; }

# ok ARGS...: must exit 0
ok() {
	run "$@" || return 1
	if [ $RC -ne 0 ]; then
		fail "exit $RC, expected 0: gpunvme $*"
		show
		return 1
	fi
	return 0
}

# bad CODE PATTERN ARGS...: must exit CODE with exactly one stderr line
# "gpunvme: ..." that matches PATTERN (case-insensitive; see BAD_GREP)
bad() {
	local code=$1 pat=$2
	shift 2
	run "$@" || return 1
	if [ $RC -ne "$code" ]; then
		fail "exit $RC, expected $code: gpunvme $*"
		show
		return 1
	fi
	local lines
	lines=$(wc -l <"$ERR")
	if [ "$lines" -ne 1 ]; then
		fail "stderr has $lines lines, expected exactly 1: gpunvme $*"
		show
		return 1
	fi
	if ! grep -q '^gpunvme: ' "$ERR"; then
		fail "stderr does not start with 'gpunvme: ': gpunvme $*"
		show
		return 1
	fi
	if ! grep -qi "${BAD_GREP:--F}" -- "$pat" "$ERR"; then
		fail "stderr does not match '$pat': gpunvme $*: $(cat "$ERR")"
		return 1
	fi
	return 0
}
