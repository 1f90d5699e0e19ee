#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark 2: sequential bandwidth into GPU memory, all methods in one run
# (see bench/bench_gpu_bw.cu for what each row measures):
#   (b) cudaMemcpy from pinned memory (the link), (a) this project (GPU
#   threads reading an emulated RAM namespace into GPU memory), (c) pread +
#   cudaMemcpyAsync from a page-cached file, (d) cuFile in compat mode.
#
# Usage: bench/gpu_bw.sh BUILD_DIR [--quick] [OUT_DIR]
#   BUILD_DIR  a Release build with CUDA, e.g.
#              cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native
#              cmake --build b -j16 --target bench_gpu_bw
#   --quick    smoke test: 1 GiB, one configuration per method, one run each
#   OUT_DIR    where the results go (default: $OUT if set, else
#              bench/results/gpu_bw-<date>): env.txt (machine, date), commands.txt,
#              run.log (all output), gpu_bw.csv, gpu_bw.md, cufile.json and
#              cufile-logs/ (cuFile's own log)
# Environment: GPU_BW_BYTES (bytes per run, default 8G; 1G with --quick),
#   GPU_BW_FILE (the test file, default /var/tmp/gpunvme_gpu_bw.bin, on a
#   disk-backed file system: cuFile wants a block device), GPU_BW_KEEP=1
#   keeps the file afterwards.
# Run as root for the cuFile rows: cuFile refuses a file whose disk has no
# udev record, so this script writes a minimal one (/run/udev/data/bMAJ:MIN)
# when none exists. Exit status: 0 when every method ran and verified.
set -euo pipefail

usage() { echo "usage: bench/gpu_bw.sh BUILD_DIR [--quick] [OUT_DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
B=$1
shift
QUICK=0
OUTDIR=""
for a in "$@"; do
	case "$a" in
	--quick) QUICK=1 ;;
	-*) usage ;;
	*) OUTDIR=$a ;;
	esac
done
BIN=$B/bin/bench_gpu_bw
if [ ! -x "$BIN" ]; then
	echo "gpu_bw.sh: $BIN not found: build it first (cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release" \
		"-DCMAKE_CUDA_ARCHITECTURES=native && cmake --build $B -j16 --target bench_gpu_bw)" >&2
	exit 1
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "gpu_bw.sh: no GPU (nvidia-smi -L failed)" >&2
	exit 1
fi
OUTDIR=${OUTDIR:-${OUT:-bench/results/gpu_bw-$(date -u +%Y%m%d-%H%M%S)}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
CSV=$OUTDIR/gpu_bw.csv
MD=$OUTDIR/gpu_bw.md
ENVF=$OUTDIR/env.txt
CMDS=$OUTDIR/commands.txt
LOG=$OUTDIR/run.log   # every program's stderr, one section per method
FILE=${GPU_BW_FILE:-/var/tmp/gpunvme_gpu_bw.bin}

if [ $QUICK -eq 1 ]; then
	BYTES=${GPU_BW_BYTES:-1G}
	REPS=1
	EMU_ARGS=(-c 2M -w 8 -Q 1)
	MEMCPY_ARGS=(-c 256M)
	PREAD_ARGS=(-c 2M -w 4 -Q 2)
	CUFILE_ARGS=(-c 2M -w 4)
	LIMIT=300
else
	BYTES=${GPU_BW_BYTES:-8G}
	REPS=3
	EMU_ARGS=(-c "128K,512K,1M,2M" -w "4,8,12" -Q "1,2")
	MEMCPY_ARGS=(-c "2M,256M")
	PREAD_ARGS=(-c "128K,512K,1M,2M" -w "1,4,8" -Q 2)
	CUFILE_ARGS=(-c "128K,512K,1M,2M" -w "1,4,8")
	LIMIT=1500
fi

{
	echo "# gpu_bw.sh $(date -u '+%Y-%m-%d %H:%M:%S UTC')$([ $QUICK -eq 1 ] && echo ' (quick)')"
	echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader 2>&1 | head -1)"
	echo "cuda: $(nvcc --version 2>/dev/null | tail -1 || echo unknown)"
	echo "host: $(uname -srm), $(nproc) cpus, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "bytes per run: $BYTES, runs per configuration: $REPS (seconds = median)"
	echo "file: $FILE ($(findmnt -no SOURCE,FSTYPE -T "$(dirname "$FILE")" 2>/dev/null || echo '?'))"
	echo "build: $B ($(grep -m1 '^CMAKE_BUILD_TYPE' "$B/CMakeCache.txt" 2>/dev/null || echo '?'))"
	echo "git: $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo '?')"
} | tee "$ENVF"
: >"$CMDS"
: >"$LOG"
FAILED=()
TMPLOG=$(mktemp "${TMPDIR:-/tmp}/gpu_bw.XXXXXX")
trap 'rm -f "$TMPLOG"' EXIT

# say TEXT: to the terminal and the log
say() { echo "$*" | tee -a "$LOG" >&2; }

# run NAME ARGS...: one method; CSV rows to the table, stderr to the log
run() {
	local name=$1
	shift
	echo "timeout $LIMIT $BIN $*" >>"$CMDS"
	say "== $name: $BIN $*"
	local rc=0
	timeout -k 10 "$LIMIT" "$BIN" "$@" >>"$CSV" 2>"$TMPLOG" || rc=$?
	tee -a "$LOG" <"$TMPLOG" >&2
	if [ $rc -ne 0 ]; then
		if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
			say "gpu_bw.sh: $name: timed out after ${LIMIT}s"
		elif [ $rc -eq 3 ]; then
			say "gpu_bw.sh: $name: not built (skipped)"
			return 0
		else
			say "gpu_bw.sh: $name: exit $rc (see $LOG)"
		fi
		FAILED+=("$name")
	fi
	return 0
}

echo "method,chunk_bytes,workers,queues,bytes,seconds,gb_per_s,verified,reps,best_gb_per_s,note" >"$CSV"
# (b) the link first: every other row is read against it
run memcpy -m memcpy -s "$BYTES" -r "$REPS" "${MEMCPY_ARGS[@]}"
# (a) this project
run emu -m emu -s "$BYTES" -r "$REPS" "${EMU_ARGS[@]}"

# the file for (c) and (d): same bytes, on a disk-backed file system
mkdir -p "$(dirname "$FILE")"
need=$(numfmt --from=iec "$BYTES")
avail=$(df -B1 --output=avail "$(dirname "$FILE")" | tail -1)
if [ -f "$FILE" ]; then avail=$((avail + $(stat -c %s "$FILE"))); fi
if [ "$avail" -lt $((need + (1 << 30))) ]; then
	say "gpu_bw.sh: $(dirname "$FILE") has $avail bytes free, need $need + 1 GiB (set GPU_BW_FILE)"
	FAILED+=(file)
else
	echo "timeout $LIMIT $BIN -m mkfile -f $FILE -s $BYTES" >>"$CMDS"
	say "== mkfile: $BIN -m mkfile -f $FILE -s $BYTES"
	mrc=0
	timeout -k 10 "$LIMIT" "$BIN" -m mkfile -f "$FILE" -s "$BYTES" 2>"$TMPLOG" || mrc=$?
	tee -a "$LOG" <"$TMPLOG" >&2
	if [ $mrc -ne 0 ]; then
		say "gpu_bw.sh: writing $FILE failed (exit $mrc)"
		FAILED+=(mkfile)
	else
		# (c) pread + cudaMemcpyAsync (the program reads the file once first)
		run pread -m pread -f "$FILE" -s "$BYTES" -r "$REPS" "${PREAD_ARGS[@]}"

		# (d) cuFile, compat mode. cuFile looks the file's disk up in the udev
		# database; without a record it refuses the handle. Give the disk a
		# minimal one (only if it has none: a real udev's records stay as they are).
		majmin=$(findmnt -no MAJ:MIN -T "$FILE" 2>/dev/null | head -1 | tr -d ' ')
		fstype=$(findmnt -no FSTYPE -T "$FILE" 2>/dev/null | head -1 | tr -d ' ')
		udev=/run/udev/data/b$majmin
		if [ -z "$majmin" ] || [ "${majmin%%:*}" = 0 ]; then
			echo "cufile: $FILE is not on a block device ($majmin $fstype): cuFile may refuse it" | tee -a "$ENVF"
		elif [ -e "$udev" ]; then
			echo "cufile: udev record $udev exists: left as it is" | tee -a "$ENVF"
		elif [ "$(id -u)" -ne 0 ]; then
			echo "cufile: not root: cannot write $udev; cuFile may refuse the file" | tee -a "$ENVF"
		else
			mkdir -p /run/udev/data
			printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\n' "${fstype:-ext4}" >"$udev"
			echo "cufile: wrote $udev (E:ID_FS_USAGE=filesystem, E:ID_FS_TYPE=${fstype:-ext4})" | tee -a "$ENVF"
		fi
		# compat mode forced: POSIX reads into a bounce buffer, then copies to
		# the GPU. The file is opened without O_DIRECT, so from the page cache.
		mkdir -p "$OUTDIR/cufile-logs"
		cat >"$OUTDIR/cufile.json" <<-JSON
		{
		    "logging": { "dir": "$OUTDIR/cufile-logs", "level": "ERROR" },
		    "properties": {
		        "allow_compat_mode": true,
		        "force_compat_mode": true,
		        "use_poll_mode": false,
		        "max_direct_io_size_kb": 16384
		    },
		    "fs": { "generic": { "posix_unaligned_writes": false } }
		}
		JSON
		echo "CUFILE_ENV_PATH_JSON=$OUTDIR/cufile.json" >>"$CMDS"
		export CUFILE_ENV_PATH_JSON=$OUTDIR/cufile.json
		run cufile -m cufile -f "$FILE" -s "$BYTES" -r "$REPS" "${CUFILE_ARGS[@]}"
		unset CUFILE_ENV_PATH_JSON
		grep -h '^cufile:' "$TMPLOG" >>"$ENVF" 2>/dev/null || true
	fi
	[ "${GPU_BW_KEEP:-0}" = 1 ] || rm -f "$FILE"
fi

# the table: median GB/s, best GB/s, share of the cudaMemcpy rate
if [ -s "$CSV" ]; then
	awk -F, -v env="$(head -1 "$ENVF")" '
	NR == 1 { next }
	{ rows[NR] = $0; if ($1 ~ /^cudaMemcpy/ && $7 + 0 > ref) ref = $7 + 0 }
	END {
		print env
		print ""
		print "| method | chunk | workers / threads | queues / buffers | GB/s (median) | best GB/s | of cudaMemcpy | verified | note |"
		print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
		for (i = 2; i <= NR; i++) {
			if (!(i in rows)) continue
			split(rows[i], f, ",")
			c = f[2] + 0
			cs = c >= 1048576 ? sprintf("%g MiB", c / 1048576) : sprintf("%g KiB", c / 1024)
			pct = ref > 0 ? sprintf("%.0f%%", 100 * f[7] / ref) : "-"
			printf "| %s | %s | %s | %s | %.2f | %.2f | %s | %s | %s |\n", f[1], cs, f[3], f[4], f[7], f[10], pct, f[8], f[11]
		}
	}' "$CSV" >"$MD"
	cat "$MD"
fi
say "gpu_bw.sh: logs, CSV and table in $OUTDIR"
if [ ${#FAILED[@]} -ne 0 ]; then
	say "gpu_bw.sh: failed: ${FAILED[*]}"
	exit 1
fi
if grep -q ',NO(\|,error,' "$CSV"; then
	say "gpu_bw.sh: some rows did not verify"
	exit 1
fi
exit 0
