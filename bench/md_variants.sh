#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# What limits the 4-member array (docs/md.md): bench/md_run.sh on N members
# under several queue, depth, chunk and device-model settings in one go,
# each in $OUT/<name>/ with a `top -H` sample taken during the load.
# Usage: OUT=DIR [N=4] bench/md_variants.sh SIZE "name:VAR=v,VAR=v ..." ...
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=$1
shift
B=${BUILD:-$ROOT/build-md}
OUT=${OUT:?}
first=1
for spec in "$@"; do
	name=${spec%%:*}
	vars=${spec#*:}
	mkdir -p "$OUT/$name"
	(top -H -b -d 0.5 -n 600 -w 200 > "$OUT/$name/top.txt" 2>&1 &
	 echo $! > "$OUT/$name/top.pid")
	env ${vars//,/ } MEMBERS="${N:-4}" OUT="$OUT/$name" BUILD="$B" \
		$([ $first -eq 1 ] || echo SKIP_BUILD=1) bash "$ROOT/bench/md_run.sh" "$SIZE" > "$OUT/$name/run.log" 2>&1
	kill "$(cat "$OUT/$name/top.pid")" 2>/dev/null
	first=0
	echo "== $name ($vars): $(tail -n 2 "$OUT/$name/summary.csv" | head -n 1)"
done
