# Sourced by bench/gpu_run.sh: a time budget for the whole call, commands that each get a slice of
# what is left, and results packed into $OUT after each part, so that a call cut short still brings
# back what it finished. DRY=1 prints each command instead of running it (no install, no GPU, no
# file under $OUT).
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# run NAME WANT RESERVE CMD...: at most WANT s, and never into the last RESERVE s of the budget
run() {
  local name=$1 want=$2 reserve=$3; shift 3
  local lim=$(( $(left) - reserve )); (( lim > want )) && lim=$want
  if [ -n "${DRY:-}" ]; then echo "  [$name, limit ${lim} s] $(printf '%q ' "$@")"; return 0; fi
  if (( lim < 20 )); then log "$name: skipped (only $(left) s left)"; return 99; fi
  log "$name: start (limit ${lim} s)"
  local t=$(date +%s)
  timeout -k 5 "$lim" "$@"; local rc=$?
  log "$name: rc=$rc in $(( $(date +%s) - t )) s"
  return $rc
}
# runsh NAME WANT RESERVE 'SHELL LINE': run's slice for one shell line (redirections, pipes, env);
# DRY=1 prints the line itself
runsh() {
  local name=$1 want=$2 reserve=$3
  if [ -n "${DRY:-}" ]; then
    local lim=$(( $(left) - reserve )); (( lim > want )) && lim=$want
    echo "  [$name, limit ${lim} s] $4"; return 0
  fi
  run "$name" "$want" "$reserve" bash -c "$4"
}
# post NAME 'SHELL LINE': a short step after a measurement (advise, a report, a table, a merge), at
# most 60 s whatever the budget says, its failure logged and passed over; DRY=1 prints the line
post() {
  if [ -n "${DRY:-}" ]; then echo "  [$1, post] $2"; return 0; fi
  timeout -k 5 60 bash -c "$2" || log "$1: rc=$?"
}
# enough S: true while more than S seconds of the budget are left (always, with DRY=1)
enough() { [ -n "${DRY:-}" ] || (( $(left) > $1 )); }
# pack NAME: $R (without prof/) as $OUT/NAME.tar.gz and $R/prof, when it holds anything, as
# $OUT/NAME_prof.tar.gz (each written beside, then moved: never half a file)
pack() {
  [ -n "${DRY:-}" ] && { echo "  [pack] $OUT/$1.tar.gz, $OUT/$1_prof.tar.gz"; return 0; }
  tar -czf "$OUT/$1.tar.gz.tmp" -C "$R" --exclude ./prof . && mv "$OUT/$1.tar.gz.tmp" "$OUT/$1.tar.gz"
  if [ -n "$(ls -A "$R/prof" 2>/dev/null)" ]; then
    tar -czf "$OUT/$1_prof.tar.gz.tmp" -C "$R/prof" . && mv "$OUT/$1_prof.tar.gz.tmp" "$OUT/$1_prof.tar.gz"
  fi
}
# setup: the carried wheels, the import path, and what this host is
setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
  log "setup done; $(nproc) CPUs; $(nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | head -1)"
  python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
}
# start: the clock (BUDGET s, 540 unless set), $OUT, everything printed also kept in $OUT/run.log,
# the part under way packed at exit; then setup
start() {
  T0=$(date +%s); BUDGET=${BUDGET:-540}; PART=""
  if [ -n "${DRY:-}" ]; then OUT=${OUT:-/tmp/out}; echo "DRY=1: BUDGET=$BUDGET OUT=$OUT"; return 0; fi
  OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
  exec > >(tee -a "$OUT/run.log") 2>&1
  trap '[ -n "$PART" ] && pack "$PART"' EXIT
  setup
}
# part NAME: a fresh $R=/tmp/gpu_run/NAME (with $R/prof for profiles) for the part's results
part() {
  PART=$1; R=/tmp/gpu_run/$1
  if [ -n "${DRY:-}" ]; then echo "== $1 (R=$R)"; return 0; fi
  rm -rf "$R"; mkdir -p "$R/prof"
  log "== part $1"
}
