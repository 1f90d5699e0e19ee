#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 32: the emulator's copies in a process of their own
# (GPUNVME_EMU_DMA=process) against in the application's context (=inproc), same machine, same
# run: the GPU fault soak and the multi-process test alone (time, result),
# and `gpunvme load` of a model from an ext4 image at Tier 2 (load rate and
# command wall time), each with image reads by pread and from the mapping
# (GPUNVME_EMU_FILE_READ=pread|map; FR picks) and staged reads merged into
# runs or copied piece by piece (GPUNVME_EMU_STAGE_MERGE; MERGE lists the
# values, "" = the default, 0 = a copy and an event per piece); VERIFY=1
# compares every byte through the CPU path (gpunvme load --verify); PVM=1
# first times pread alone from the page-cached image with 1, 8 and 16 threads;
# V lists device-string variants as QUERY/QUEUES ("-" = none, "," for "&",
# QUEUES 0 = the CLI's default), e.g. V="-/0 workers=16/16 mdts=7/0";
# PROF=1 sets GPUNVME_EMU_PROFILE=1 and sums each load's profile lines (the
# workers' busy, file-read and copy-wait seconds; the lanes' pread and
# staging-wait seconds) into one line.
#   OUT=/dir [BD=build-gpu] [SIZE=4G] [FR="pread map"] [MERGE="default 0"] [V=...] [PROF=1] [VERIFY=1] [PVM=1] [PHASES="soak mp load"] bash bench/emu_dma_diag.sh
R=${OUT:?set OUT}
mkdir -p "$R"
exec > >(tee -a "$R/diag.log") 2>&1
BD=${BD:-build-gpu}
B=$PWD/$BD/bin
log() { echo "[$(date -u +%T)] $*"; }
el() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for ph in ${PHASES:-soak mp load}; do
	for mode in process inproc; do
		export GPUNVME_EMU_DMA=$mode
		case $ph in
		soak | mp)
			t=gpu.soak_gpu_faults
			[ $ph = mp ] && t=gpu.multiproc
			[ $ph = soak ] && [ $mode = inproc ] && [ "${SOAK_BASE:-0}" = 0 ] && continue
			t0=$(date +%s.%N)
			(cd "$BD" && timeout 300 ctest -R "^$t\$" --output-on-failure >"$R/$ph-$mode.log" 2>&1)
			rc=$?
			log "$ph $mode: rc $rc, $(el $t0) s, $(grep -E 'tests passed|result:|unexplained' "$R/$ph-$mode.log" | tr '\n' ' ')"
			;;
		load)
			W=${W:-$(mktemp -d /tmp/emudma.XXXXXX)}
			if [ ! -f "$W/fs.img" ]; then
				mkdir -p "$W/tree"
				"$B/gpunvme-mkmodel" --format safetensors --size "${SIZE:-4G}" --seed 5 -o "$W/tree/m.safetensors" >/dev/null
				truncate -s $(( $(stat -c %s "$W/tree/m.safetensors") / 1048576 * 11 / 10 + 64 ))M "$W/fs.img"
				mkfs.ext4 -q -F -d "$W/tree" "$W/fs.img"
				cat "$W/fs.img" >/dev/null # page cache warm
			fi
			# image reads by pread (the default) against copies from the
			# mapping (the baseline), alternating
			# PVM=1: the page cache alone, pread by 1, 8 and 16 threads in
			# the staging's 512 KiB pieces (bench/pread_vs_mmap.c), once:
			# is it the limit of the staged load?
			if [ "${PVM:-0}" = 1 ] && [ "$mode" = process ]; then
				cc -O2 -pthread -o "$W/pvm" bench/pread_vs_mmap.c &&
					for th in 1 8 16; do log "pvm $("$W/pvm" "$W/fs.img" pread $th 512)"; done
			fi
			v=()
			[ "${VERIFY:-0}" = 1 ] && v=(--verify)
			for i in 1 2; do
				for fr in ${FR:-pread map}; do
					for mg in ${MERGE:-default}; do
						[ "$mg" = default ] && mg=
						for var in ${V:--/0}; do
							qs=${var%/*}
							nq=${var##*/}
							uri="emu:$W/fs.img"
							[ "$qs" != - ] && uri="$uri?$(echo "$qs" | tr , '&')"
							qa=()
							[ "$nq" != 0 ] && qa=(--queues "$nq")
							t0=$(date +%s.%N)
							GPUNVME_EMU_PROFILE=${PROF:-0} GPUNVME_EMU_STAGE_MERGE=$mg GPUNVME_EMU_FILE_READ=$fr timeout 120 "$B/gpunvme" load "$uri" /m.safetensors --tier 2 --no-progress "${qa[@]}" "${v[@]}" >"$R/one.log" 2>&1
							rc=$?
							out="$(grep -v 'gpunvme-emu profile' "$R/one.log" | tail -2 | tr '\n' ' ')rc=$rc"
							log "load $mode $fr merge=${mg:-default} $var $i: $(el $t0) s wall: $out"
							if [ "${PROF:-0}" = 1 ]; then
								cat "$R/one.log" >>"$R/prof-all.log"
								awk '/worker [0-9]+:/ { n++; c += $5; for (i = 1; i <= NF; i++) { if ($i == "busy") b += $(i + 1); if ($i == "reads") f += $(i + 1); if ($i == "end") s += $(i + 1); if ($i == "burst") { v = $(i + 1); sp += v; if (v > mx) mx = v; bb += $(i + 3) } } }
								     /pread into staging/ { for (i = 1; i <= NF; i++) { if ($i == "staging" && $(i - 1) == "into") p += $(i + 1); if ($i == "staging" && $(i - 1) == "for") w += $(i + 1) } }
								     END { printf "prof: %d workers, %d commands, busy %.2f s, file %.2f s (pread %.2f, staging waits %.2f), pass-end waits %.2f s, last bursts %.2f s (longest %.3f), busy %.2f s of them\n", n, c, b, f, p, w, s, sp, mx, bb }' "$R/one.log" | sed 's/^/    /'
							fi
						done
					done
				done
			done
			;;
		esac
	done
done
[ -n "${W:-}" ] && rm -rf "$W"
log done
