#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
# The layering of src/: every '#include "X/..."' in a file of src/F/ is an
# edge F -> X (X another src/ folder; include/gpunvme/ is the public API and
# not a layer). The folders must form a DAG: tsort refuses a graph with a
# loop and names it. Prints the edges with -v. Exit 0 clean, 1 on a cycle.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

edges() {
	local d f t
	for d in src/*/; do
		f=$(basename "$d")
		grep -ho '^#include "[a-z_]*/' "$d"* 2>/dev/null | sed -e 's/^#include "//' -e 's|/$||' | sort -u |
			while read -r t; do
				[ "$t" != "$f" ] && [ -d "src/$t" ] && echo "$f $t"
			done
	done
	return 0
}

e=$(edges)
[ "${1:-}" = "-v" ] && printf '%s\n' "$e"
if ! printf '%s\n' "$e" | tsort >/dev/null 2>"${TMPDIR:-/tmp}/lint-includes.$$"; then
	echo "lint-includes: include cycle between src/ folders:" >&2
	cat "${TMPDIR:-/tmp}/lint-includes.$$" >&2
	rm -f "${TMPDIR:-/tmp}/lint-includes.$$"
	exit 1
fi
rm -f "${TMPDIR:-/tmp}/lint-includes.$$"
echo "lint-includes: src/ folders form a DAG ($(printf '%s\n' "$e" | grep -c .) edges)"
