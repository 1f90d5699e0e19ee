# call 6 (session 17, wip/pass-cap e1e3f63): md, 4 x Gen5, 512 KiB chunks, 4 workers/member: pass_mb unset, 8, 2 (same array, every load verified)
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
OUT=$OUT PHASES="build" timeout 120 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
for pm in 0 8 2; do
  M="read_mbps=14000&iops=2500000&latency_us=60"; [ $pm = 0 ] || M="$M&pass_mb=$pm"
  GPUNVME_EMU_PROFILE=1 MODEL="$M" VERIFIED4= OUT=$OUT/md-p$pm WORKDIR=/dev/shm/mdw MEMBERS="4:4" CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm timeout 100 bash bench/md_run.sh 4G > $OUT/md-p$pm.log 2>&1
  echo "pass_mb $pm rc=$? $(( $(date +%s) - T0 )) s: $(tail -n 1 $OUT/md-p$pm/summary.csv)"
  f=$(ls $OUT/md-p$pm/load-*.err 2>/dev/null | head -1); [ -n "$f" ] && echo "  $(grep -o 'idle [0-9.]* s' $f | tr '\n' ' ') | $(grep -o 'outstanding [0-9.]* on average' $f | awk '{s+=$2} END {printf "outstanding sum %.1f", s}')"
done
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
