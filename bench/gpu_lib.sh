# Shared by the device scripts: a time budget for the whole call, commands that each get a slice of
# what is left, and results packed into $OUT after each part so that a call cut short still brings
# back what it finished. A script sources it from the repo root and calls `start NAME`.
log() { echo "[$(date +%T) +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# run NAME WANT RESERVE CMD...: at most WANT s, and never into the last RESERVE s of the budget
run() {
  local name=$1 want=$2 reserve=$3; shift 3
  local lim=$(( $(left) - reserve )); (( lim > want )) && lim=$want
  if (( lim < 20 )); then log "$name: skipped (only $(left) s left)"; return 99; fi
  log "$name: start (limit ${lim} s)"
  local t=$(date +%s)
  timeout -k 5 "$lim" "$@"; local rc=$?
  log "$name: rc=$rc in $(( $(date +%s) - t )) s"
  return $rc
}
# pack NAME: $R as $OUT/NAME.tar.gz (written beside, then moved: never half a file)
pack() { tar -czf "$OUT/$1.tar.gz.tmp" -C "$R" . && mv "$OUT/$1.tar.gz.tmp" "$OUT/$1.tar.gz"; }
# setup: the carried wheels, the import path, and what this host is
setup() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
  log "setup done; $(nproc) CPUs; $(nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader | head -1)"
  python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
}
# start NAME: the clock (BUDGET s, 540 unless set), $OUT, a fresh $R=/tmp/NAME for the results,
# everything printed also kept in $OUT/run.log, $R packed as $OUT/NAME.tar.gz at exit; then setup
start() {
  T0=$(date +%s); BUDGET=${BUDGET:-540}
  OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
  R=/tmp/$1; rm -rf "$R"; mkdir -p "$R"
  exec > >(tee -a "$OUT/run.log") 2>&1
  trap "pack $1" EXIT
  setup
}
