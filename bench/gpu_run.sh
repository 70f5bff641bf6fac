#!/bin/bash
# The GPU runs a maintainer reruns, one named PART each, in one script (they were one script per
# machine lease until 2026-11-28; see bench/RESULTS.md's note for the old scripts):
#
#   bash bench/gpu_run.sh PART [PART...]      parts run in the order given, under one time budget
#   DRY=1 bash bench/gpu_run.sh PART...       prints each part's commands; runs nothing (any machine)
#   bash bench/gpu_run.sh                     prints this text
#
# Through the device tool, from the repository root (the GPU host reaches no package index):
#   ../shared/tools/gpu-wheels.sh duckdb isal     once, here: dlscope's wheels the host lacks, in .whl/
#     (ncu_cupy also needs cupti-python cuda-pathfinder pyelftools; see gpu-wheels.sh)
#   run(command="BUDGET=540 bash bench/gpu_run.sh try_vs_measure", carry=[".whl"])
#   run(command="GPUS=4 ROUNDS=3 bash bench/gpu_run.sh two_launch", carry=[".whl"], kind="nvidia-h100-x4")
# Every part needs dlscope's wheels in .whl (installed to /tmp/site, PYTHONPATH=/tmp/site:src) and
# torch (on the host). The tool brings back at most 8 files under $OUT: $OUT/run.log (everything
# printed), then per part $OUT/PART.tar.gz (its JSON, logs and text) and $OUT/PART_prof.tar.gz (its
# profiles, when it keeps any): three parts a call at most, fewer with two_launch. Each part is
# packed as it ends (and at exit), so a call cut short brings back what it finished.
#
# Knobs (environment variables). A knob applies to every part of the call that reads it; unset, each
# part takes the value its last lease used, shown as [default].
#   BUDGET [540]  seconds for the whole call: each command gets a slice of what is left and a part
#                 skips what no longer fits (keep it under the tool's 600 s a command)
#   OUT [/tmp/out]  where results go (the device tool sets it)
#   DRY           non-empty: print the commands, run nothing
#
# Parts, one GPU (nvidia-h100-x1):
#   hooks            bench/hook_costs.py: the phase hooks' cost per step, one call's cost, the launch
#                    queue's depth, the GPU marks' cost. BLOCKS [12]. -> hook_costs.json (lease 7)
#   marks            the GPU phase marks: hook_costs.py --marks-only, then each suite model's baseline
#                    profiled and its phase_gpu marks counted. MODELS [gpt2 cnn mlp], STEPS [30]
#                    (STEPS=80 MODELS=gpt2: lease 8's clock-resync count). -> marks_cost.json,
#                    marks_MODEL.json, profiles (leases 7, 8)
#   batch_truth      run_batch_truth.py: each batch size as its own program, alternated, untraced.
#                    BATCH_JOBS [cnn:64,128:6:50 mlp:256,1024:3:300] as MODEL:BATCHES:RUNS:STEPS.
#                    -> batch_truth_MODEL.json (leases 7, 10)
#   integrations     bench/integrations_gpu.py: Lightning and HF callbacks on the GPU, and the fused
#                    Adam truth. ROUNDS [3], STEPS [300]. -> integrations_gpu.json, profiles (lease 7)
#   profile_cost     the launch-bound MLP plain and under `dlscope profile`, alternated: what the hooks
#                    cost the untraced steps. MODEL [mlp], ROUNDS [2], STEPS [400].
#                    -> MODEL_plain_N.json, MODEL_prof_N.json (dist lease 5, part 3)
#   try_vs_measure   `dlscope try` against measure.py on the same fix, back to back: gpt workers, mlp
#                    compile_graphs, cnn bf16 if time is left; table at the end.
#                    -> measure_MODEL.json, try_MODEL_FIX.json, try_MODEL_FIX_steps.json (lease 9)
#   try_new_fixes    issue 38's fixes on the CNN (whose baseline has pageable copies, copies not
#                    overlapped and unused memory): `dlscope try --fixes pinned,batch`, then their truths:
#                    the source's pinned variant by measure.py, batch 64 -> 128 as programs.
#                    ROUNDS [3], STEPS [25]. -> try_cnn_new.json, try_cnn_new_steps.json,
#                    measure_cnn_pin.json, batch_truth_cnn.json (2026-11-28)
#   cnn_truth        the CNN's noisy truths: its data decoding alone in ROUNDS [6] processes
#                    (cnn_host_probe.py), batch 64 -> 128 as programs, bf16 by measure.py and by
#                    `dlscope try`. -> host_probe.jsonl, batch_truth_cnn.json, measure_cnn.json,
#                    try_cnn_bf16*.json (lease 10)
#   heldout          bench/heldout/vit_train.py, never used to tune the advice: profiled and advised,
#                    each fix in the source alternated (alternate.py), then `dlscope try`.
#                    ROUNDS [3], STEPS [40]. -> advise.json, truth.json, try_vit.json, profile (lease 11)
#   ncu_cupy         `dlscope ncu --top 3` on a CuPy program whose top kernel CUPTI names mangled
#                    (needs the CUPTI wheels above). -> cupy_top.json, ncu.log, ncu_measured.json,
#                    kernel_metrics.txt, profile (2026-11-27)
#   full_cost        bench/full_mode_cost.py: GPT-2-class bf16 steps bare, under torch.profiler (record_shapes +
#                    profile_memory) and under `dlscope profile --mode full`, fresh processes, alternated;
#                    in one process, blocks alternated (ROUNDS [8], STEPS [20] a block, FULL_BUDGET [200] s), then
#                    full mode minus each part (GPU marks, phase hooks, NVML, spool flushes; PART_ROUNDS [3]).
#                    PROCESSES=1: fresh processes instead (ROUNDS [6], STEPS [50]; WITH_PARTS=1 adds the parts).
#                    -> full_mode_cost.json, full_mode_parts.json (issue 39, 2026-11-28)
#   modules          issue 42's module view: bench/programs/module_view_gpu.py profiles a GPT-2-class and a
#                    ResNet-like training step (coverage of forward+backward kernel time by modules, the
#                    optimizer apart, the advice's module sentence), then bare and profiled runs
#                    alternated (overhead), then the hooks' cost per module call. ROUNDS [3], STEPS [30].
#                    -> module_view_gpu.json, modules.log, profiles (not run yet)
#   roofline_ncu     issue 42: bench/roofline_vs_ncu.py on the suite's gpt and cnn (NCU_MODELS [gpt cnn],
#                    NCU_VARIANT [fused_opt], NCU_STEP [2]) in fp32 with TF32 off: the roofline model's
#                    FLOPs and bytes per op against ncu's counters over one step's kernels.
#                    -> roofline_ncu_MODEL.json/.txt, ncu_MODEL.csv.gz, profiles (2026-11-28)
#   jax_unannotated  issue 40's acceptance: bench/programs/jax_unannotated.py (a flax + optax transformer LM, no
#                    step annotations) bare, then under `dlscope profile` (every call of its jit step traced:
#                    no annotation, no detail window), its own timer beside each; bench/jax_steps_check.py
#                    compares the median derived step with the program's (within 5%), then summary, advice
#                    and step_sum as JSON. Needs jax, flax, optax on the host. STEPS [60], SKIP [5],
#                    SMALL [unset; 1: the tiny model, for a check on a CPU].
#                    -> versions.txt, bare_times.json, prof_times.json, check.json, summary.json,
#                    advise.json, step_sum.json, *.log, profile (one GPU, ~3 min expected; on a CPU only so far)
#   fuzz             bench/fuzz.py for the rest of the budget on the host's CPUs (run it last).
#                    SEED [183] (take a new one per run), FUZZ_JOBS [nproc], FUZZ_TMP [unset: TMPDIR
#                    as is; /dev/shm keeps the inputs in memory]. -> fuzz.json, fuzz.log, crashes/;
#                    add runs up with bench/fuzz_totals.py (copy fuzz.json to bench/fuzz_results/)
# Parts, several GPUs of one host (nvidia-h100-x2, or -x4 where GPUS=4 or a job asks for 4):
#   bert_try         issue 38's acceptance: bench/programs/bert_like.py bare BARE_RUNS [2] times (its own spread),
#                    then `dlscope try --fixes auto --gpus TRY_GPUS [auto]` timed (3 minutes wanted on 2 GPUs).
#                    -> bare_N.json, bert_try.json/.log, bert_advise.json, bert_try_phases.json (each run's host
#                    phases, bench/try_run_phases.py), the first run's profile
#   defer_sync       issue 38's defer_sync fix on tests/programs/defer_probe.py (a loop that reads .item() every
#                    step after HOST_MS [4] of Python, an MLP of WIDTH [2048]): `try --fixes auto,defer_sync`
#                    (--max-rounds ROUNDS [4]), its advice; NAN_CHECK=1 adds the probe that checks each loss
#                    for NaN at once (meaning kept: no saving expected). -> defer_auto.json, defer_advise.txt,
#                    defer_nan.json (2026-11-28)
#   queue_depth      bench/queue_depth.py: launches the GPU's queue holds behind a sleeping kernel, per kind of
#                    kernel (tiny add_, AdamW's per-parameter ops, strided), and an AdamW step's. -> queue_depth.json
#   startup          bench/startup_probe.py: the BERT-like program's start-up stage by stage (imports, model, CUDA
#                    context, first step, every step), bare twice and profiled once. -> startup_*.json (2026-11-28)
#   try_one_gpu      `dlscope try --fixes bf16 --repeat 3` on the suite's GPT on one GPU (its runs in one queue,
#                    each started ahead): issue 37's before/after try again. -> try_one.json/.log (2026-11-28)
#   nccl_timeout     issue 40: a rank hangs in a 2-GPU NCCL job whose other rank waits in the all-reduce
#                    (`ddp_dies.py --how hang --item`, a 10 s timeout), under `dlscope profile`, for each
#                    TORCH_NCCL_ASYNC_ERROR_HANDLING in HANDLING [1 3]. -> run_N.log, summary_N.txt, profiles
#                    (2026-11-28, as bench/nccl_timeout.sh then)
#   try_gpus         issue 38: `dlscope try --gpus auto` on the suite's MODEL [mlp] with FIXES [fused_opt,tf32],
#                    ROUNDS [4] rounds of STEPS [15] steps, no combined round. -> try_gpus.json/.log, profile
#   dist             run_dist.py: DDP/FSDP2 balanced and with a real straggler (25 ms of Python on rank
#                    1), truth untraced then profiled and advised. DIST_JOBS [ddp:2 fsdp:2 fsdp:4] as
#                    KIND:GPUS, STEPS [40]. -> dist_KINDN.json/.log, profiles (dist leases 1-3)
#   straggler_forward  the straggler's Python inside the forward (a hook on rank 1's middle block):
#                    balanced and straggler untraced, alternated, then profiled and advised.
#                    GPUS [2], ROUNDS [2], STEPS [40], PROF_STEPS [30], PYTHON_MS [25].
#                    -> fwd_t_*.json, fwd_straggler_advise.json, profile (dist lease 5, part 1)
#   accelerate       `accelerate launch` of a balanced 2-GPU MLP, plain and profiled, alternated, every
#                    rank's host time per phase; advise and rank_waits of each profile.
#                    ROUNDS [2], STEPS [80]. -> acc_*.rankN.json, acc_advise_N.json,
#                    acc_rank_waits_N.json, profiles (dist leases 4 and 5)
#   fsdp_prefetch    FSDP2 profiled with its defaults and with fsdp_exposed_gathers' fix (--prefetch 2
#                    --keep-last), advised, and both untraced, alternated. GPUS [4], ROUNDS [3],
#                    STEPS [40], PROF_STEPS [30]. -> fsdpN_t_{base,fix}_R.json, fsdpN_*_advise.json,
#                    profiles (GPUS=2: dist lease 4; GPUS=4: dist lease 4, x4)
#   two_launch       one DDP job as two "hosts" (two torchrun --nnodes 2 launches of GPUS/2 GPUs, each
#                    under `dlscope profile`, then `dlscope merge`) against the same job in one launch,
#                    ROUNDS times; comm_sum, collective_overlap, overlap, straggler as JSON.
#                    GPUS [4], ROUNDS [3], STEPS [40]. -> {oneN,twoN}_REPORT.json, and per round
#                    $OUT/two_launch_profN.tar.gz (the merged and the one-launch profile). Table:
#                    python bench/advice_truth/two_launch_table.py DIR (dist6_x4)
#   small_collectives  one all-reduce per gradient against one bucket, untraced, alternated, then the
#                    naive job profiled and advised. GPUS [2], ROUNDS [2], STEPS [60], WIDTH [128].
#                    -> sc_{naive,bucketed}_R.json, small_advise.json, profile (dist24)
#
# Where the old lease scripts went (`git show f502c7d:bench/NAME` shows each as run):
#   gpu_single_run.sh: hooks, marks, batch_truth, integrations. gpu_single_run2.sh: marks (its two
#   `dlscope try` runs are try_vs_measure's, done again there beside measure.py). gpu_try_vs_measure.sh:
#   try_vs_measure. gpu_cnn_truth.sh: cnn_truth. gpu_heldout.sh: heldout. gpu_ncu_fuzz.sh: ncu_cupy,
#   fuzz (its FUZZ_ONLY=1 is `gpu_run.sh fuzz`). gpu_dist_run.sh: marks, dist. gpu_dist_run2.sh:
#   two_launch, accelerate, small_collectives (each in its later form). gpu_dist_run3.sh: accelerate,
#   fsdp_prefetch GPUS=2, two_launch GPUS=2. gpu_dist_run4.sh: fsdp_prefetch, two_launch.
#   gpu_dist_run5.sh: straggler_forward, accelerate, profile_cost. gpu_dist_run6.sh: two_launch.
#   gpu_small_collectives.sh: small_collectives.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast
P="python3 -m dlscope profile -f --quiet"
D="python3 -m dlscope"
TRAIN=bench/advice_truth/train.py
DIST=bench/advice_truth/dist_train.py
MEASURE=bench/advice_truth/measure.py
ACC="accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no"
gpus() { seq -s, 0 $(( $1 - 1 )); }                                    # gpus N: 0,1,...,N-1
trn() { echo "python3 -m torch.distributed.run --nproc-per-node $1"; }  # trn N: torchrun on N GPUs
rounds() { seq 0 $(( ${ROUNDS:-$1} - 1 )); }                           # rounds DEFAULT: 0..ROUNDS-1
hostinfo() {  # the host's CPU layout and GPU topology, beside the part's results
  post hostinfo "lscpu > $R/lscpu.txt 2>&1; nvidia-smi topo -m > $R/topo.txt 2>&1"
}

part_full_cost() {
  part full_cost
  hostinfo
  if [ -n "${PROCESSES:-}" ]; then  # fresh processes (as a user runs them): the machine's noise between runs stays
    run "full mode cost, processes" 600 10 python3 bench/full_mode_cost.py --rounds "${ROUNDS:-6}" --steps \
      "${STEPS:-50}" ${WITH_PARTS:+--parts} --budget $(( $(left) - 20 )) -o "$R/full_mode_cost.json"
  else  # blocks alternated in one process, then the parts' blocks in another
    run "full mode cost" 300 10 python3 bench/full_mode_cost.py --in-process --rounds "${ROUNDS:-8}" --steps \
      "${STEPS:-20}" --skip 3 --budget "${FULL_BUDGET:-200}" -o "$R/full_mode_cost.json"
    enough 120 && run "full mode parts" 600 10 python3 bench/full_mode_cost.py --in-process --parts --rounds \
      "${PART_ROUNDS:-3}" --steps "${STEPS:-20}" --skip 3 --budget $(( $(left) - 40 )) -o "$R/full_mode_parts.json"
  fi
  pack "$PART"
}

part_hooks() {
  part hooks
  run "hook costs" 150 0 python3 bench/hook_costs.py --blocks "${BLOCKS:-12}" -o "$R/hook_costs.json"
}

part_marks() {
  part marks
  run "marks cost" 60 0 python3 bench/hook_costs.py --marks-only -o "$R/marks_cost.json"
  for m in ${MODELS:-gpt2 cnn mlp}; do
    runsh "profile $m" 150 0 "$P -o $R/prof/${m}_baseline.dlscope -- python3 $TRAIN --model $m --variant baseline \
--steps ${STEPS:-30} > $R/profile_$m.log 2>&1"
    post "marks $m" "$D sql $R/prof/${m}_baseline.dlscope 'SELECT count(*) AS marks FROM phase_gpu' --format json \
> $R/marks_$m.json"
  done
}

batch_truth() {  # batch_truth MODEL:BATCHES:RUNS:STEPS [RESERVE]
  local m b r s; IFS=: read -r m b r s <<< "$1"
  runsh "batch truth $m" 330 "${2:-0}" "OUT=$R python3 bench/advice_truth/run_batch_truth.py --model $m --batches $b \
--runs $r --steps $s"
  pack "$PART"
}
part_batch_truth() {
  part batch_truth
  for j in ${BATCH_JOBS:-cnn:64,128:6:50 mlp:256,1024:3:300}; do batch_truth "$j"; done
}

part_integrations() {
  part integrations
  runsh integrations 200 0 "OUT=$R python3 bench/integrations_gpu.py --runs ${ROUNDS:-3} --steps ${STEPS:-300}"
  post profiles "mv $R/integrations_profiles.tar.gz $R/prof/ 2>/dev/null"
}

part_profile_cost() {
  part profile_cost
  local m=${MODEL:-mlp} cmd="$TRAIN --model ${MODEL:-mlp} --steps ${STEPS:-400}"
  for r in $(rounds 2); do
    enough 60 || break
    runsh "plain $r" 60 0 "CUDA_VISIBLE_DEVICES=0 python3 $cmd --times-out $R/${m}_plain_$r.json > /dev/null 2>&1"
    runsh "profiled $r" 90 0 "CUDA_VISIBLE_DEVICES=0 $P -o $R/prof/${m}_$r.dlscope -- python3 $cmd \
--times-out $R/${m}_prof_$r.json > /dev/null 2>&1"
  done
}

# try_pair MODEL FIX REPEAT STEPS WANT RESERVE: dlscope try on the unchanged program, then every run's
# step times from its profiles (the JSON goes through a file of its own: run's log lines share stdout)
try_pair() {
  local m=$1 fix=$2 rep=$3 n=$4 want=$5 reserve=$6 w=/tmp/gpu_run/try_$1
  runsh "try $m $fix x$rep" "$want" "$reserve" "$D try --fixes $fix --no-combined --repeat $rep --steps $n -f \
--format json -o $w -- python3 $TRAIN --model $m --steps 100000 > $R/try_${m}_${fix}.json 2> $w.err"
  post "steps of try $m" "tail -n 4 $w.err | cut -c1-300; python3 bench/advice_truth/try_vs_measure.py steps $w \
-o $R/try_${m}_${fix}_steps.json"
  pack "$PART"
}
part_try_vs_measure() {
  part try_vs_measure
  # 1. gpt, workers (GPT step ~70-90 ms; try's runs ~12 s each: 1 profiled + 2*REPEAT-1)
  run "measure gpt" 100 400 python3 $MEASURE --model gpt --variants workers_fix,workers --rounds 4 --block 20 \
    --warmup 5 -o "$R/measure_gpt.json"
  pack try_vs_measure
  try_pair gpt workers 4 30 130 290
  # 2. mlp, compile_graphs (MLP step ~3-10 ms; two compiled variants warm up in measure.py, 20-40 s
  #    each; each of try's compiled runs compiles again)
  run "measure mlp" 130 200 python3 $MEASURE --model mlp --variants compile_graphs_fix,compile --rounds 4 --block 0 \
    --warmup 10 -o "$R/measure_mlp.json"
  pack try_vs_measure
  try_pair mlp compile_graphs 3 100 140 70
  # 3. cnn, bf16, if time is left (CNN step ~80-150 ms, a noisy host-bound step)
  if enough 120; then
    run "measure cnn" 60 70 python3 $MEASURE --model cnn --variants bf16_fix,bf16 --rounds 3 --block 12 \
      --warmup 4 -o "$R/measure_cnn.json"
    pack try_vs_measure
    try_pair cnn bf16 2 20 $(( $(left) - 8 )) 5
  else
    log "cnn: skipped ($(left) s left)"
  fi
  post table "python3 bench/advice_truth/try_vs_measure.py table $R"
}

part_try_new_fixes() {
  part try_new_fixes
  local w=/tmp/gpu_run/try_cnn_new
  runsh "try cnn pinned,batch" 240 200 "$D try --fixes pinned,batch --no-combined --repeat ${ROUNDS:-3} \
--steps ${STEPS:-25} -f --format json -o $w -- python3 $TRAIN --model cnn --steps 100000 > $R/try_cnn_new.json 2> $w.err"
  post "steps of try cnn" "tail -n 4 $w.err | cut -c1-300; python3 bench/advice_truth/try_vs_measure.py steps $w \
-o $R/try_cnn_new_steps.json"
  pack try_new_fixes
  run "measure cnn pin" 100 100 python3 $MEASURE --model cnn --variants pin --rounds 3 --block 12 --warmup 4 \
    -o "$R/measure_cnn_pin.json"
  pack try_new_fixes
  batch_truth cnn:64,128:4:40 0
}

part_cnn_truth() {
  part cnn_truth
  hostinfo
  runsh "host probe" 120 0 "for i in $(seq -s ' ' "${ROUNDS:-6}"); do python3 bench/cnn_host_probe.py --samples 640; \
done | tee $R/host_probe.jsonl"
  pack cnn_truth
  batch_truth cnn:64,128:6:50 200
  run "measure cnn bf16" 90 110 python3 $MEASURE --model cnn --variants bf16_fix --rounds 6 --block 25 --warmup 5 \
    -o "$R/measure_cnn.json"
  pack cnn_truth
  try_pair cnn bf16 3 25 $(( $(left) - 10 )) 5
  post table "python3 bench/advice_truth/try_vs_measure.py table $R"
}

part_heldout() {
  part heldout
  local prog="python3 bench/heldout/vit_train.py" n=${STEPS:-40}
  run profile 90 400 $P -o "$R/prof/vit_baseline.dlscope" -- $prog --steps "$n"
  post advise "$D advise $R/prof/vit_baseline.dlscope --what-if --format json > $R/advise.json; \
$D advise $R/prof/vit_baseline.dlscope --what-if | head -30; $D summary $R/prof/vit_baseline.dlscope | head -40"
  pack heldout
  run truth 240 150 python3 bench/heldout/alternate.py --rounds "${ROUNDS:-3}" --skip 10 -o "$R/truth.json" -- \
    $prog --steps "$n" :: bf16=--bf16 "workers=--workers 6" tf32=--tf32 fused=--fused
  pack heldout
  runsh try $(( $(left) - 10 )) 5 "$D try --fixes bf16,workers,tf32,fused_opt --no-combined --repeat 3 --steps 25 -f \
--format json -o /tmp/gpu_run/try_vit -- $prog --steps 100000 > $R/try_vit.json 2> /tmp/gpu_run/try_vit.err"
  post "try log" "tail -n 12 /tmp/gpu_run/try_vit.err | cut -c1-300"
}

part_ncu_cupy() {
  part ncu_cupy
  local prog=$R/cupy_prog.py
  if [ -n "${DRY:-}" ]; then echo "  [write] $prog (20 steps of a 2048x2048 SGEMM and tanh in CuPy)"; else
    # the program of bench/gpu_jaxncu.py (one copy of it)
    python3 -c "import sys; sys.path.insert(0, 'bench'); from gpu_jaxncu import CUPY_PROGRAM; print(CUPY_PROGRAM)" > "$prog"
  fi
  post versions "python3 -c \"import cupti; print('cupti-python', getattr(cupti, '__version__', '?'))\" 2>&1 | tail -1; \
python3 -c 'import cuda.bindings; print(\"cuda.bindings\", cuda.bindings.__version__)' 2>&1 | tail -1; \
python3 -c 'import cupy; print(\"cupy\", cupy.__version__)' 2>&1 | tail -1"
  local prof=$R/prof/cupy.dlscope
  runsh profile 90 0 "$P -o $prof -- python3 $prog > $R/cupy_profile.log 2>&1"
  post top "$D sql $prof 'SELECT name, count(*) AS n, sum(end_ns - start_ns) / 1e6 AS ms FROM kernels GROUP BY 1 \
ORDER BY ms DESC LIMIT 3' --format json > $R/cupy_top.json 2>&1"
  runsh ncu 240 0 "$D ncu $prof --top 3 --timeout 70 -- python3 $prog > $R/ncu.log 2>&1"
  post measured "$D sql $prof 'SELECT name, count(*) AS metrics FROM kernel_metrics GROUP BY 1' --format json \
> $R/ncu_measured.json 2>&1; $D stats $prof --report kernel_metrics > $R/kernel_metrics.txt 2>&1"
}

part_fuzz() {
  part fuzz
  # --pin: one CPU per job, so each child's DuckDB runs one thread (unpinned, 64 jobs oversubscribed the
  # 64-CPU host eightfold); FUZZ_TMP=/dev/shm puts the inputs' work folders in memory (not yet measured
  # against the disk: 29.6-30.3 inputs/s with 64 jobs on the disk, 2026-11-27)
  local fs=$(( $(left) - 30 )) tmp=""
  [ -n "${FUZZ_TMP:-}" ] && tmp="TMPDIR=$FUZZ_TMP "
  if [ -z "${DRY:-}" ] && (( fs <= 60 )); then log "fuzz: skipped (only $(left) s left)"; return 0; fi
  runsh fuzz $(( fs + 25 )) 0 "${tmp}python3 bench/fuzz.py --seconds $fs --jobs ${FUZZ_JOBS:-$(nproc)} --pin \
--seed ${SEED:-183} --timeout 60 --out $R/fuzz.json --crashes $R/crashes > $R/fuzz.log 2>&1"
}

part_dist() {
  part dist
  local j kind n
  for j in ${DIST_JOBS:-ddp:2 fsdp:2 fsdp:4}; do
    kind=${j%%:*}; n=${j##*:}
    runsh "dist $j" 220 0 "CUDA_VISIBLE_DEVICES=$(gpus "$n") OUT=$R python3 bench/advice_truth/run_dist.py --nproc $n \
$([ "$kind" = fsdp ] && echo '--fsdp ')--steps ${STEPS:-40}"
    post profiles "mv $R/*_profiles.tar.gz $R/prof/ 2>/dev/null"
    pack dist
  done
}

part_straggler_forward() {
  part straggler_forward
  local n=${GPUS:-2}; local env="CUDA_VISIBLE_DEVICES=$(gpus "$n")" tr; tr=$(trn "$n")
  local slow="--slow-rank 1 --slow-where forward --python-ms ${PYTHON_MS:-25}"
  for r in $(rounds 2); do
    runsh "balanced $r" 60 0 "$env $tr $DIST --steps ${STEPS:-40} --times-out $R/fwd_t_balanced_$r.json > /dev/null 2>&1"
    runsh "straggler $r" 60 0 "$env $tr $DIST --steps ${STEPS:-40} $slow --times-out $R/fwd_t_straggler_$r.json \
> /dev/null 2>&1"
  done
  runsh profiled 120 0 "$env $P -o $R/prof/fwd_straggler.dlscope -- $tr $DIST --steps ${PROF_STEPS:-30} $slow \
> $R/fwd_straggler.log 2>&1"
  post advise "$D advise $R/prof/fwd_straggler.dlscope --format json > $R/fwd_straggler_advise.json"
}

part_accelerate() {
  part accelerate
  hostinfo
  local env="CUDA_VISIBLE_DEVICES=0,1" s=${STEPS:-80}
  for r in $(rounds 2); do
    enough 100 || break
    runsh "plain $r" 90 0 "$env $ACC bench/accelerate_train.py --steps $s --times-out $R/acc_plain_$r \
> $R/acc_plain_$r.log 2>&1"
    runsh "profiled $r" 120 0 "$env $P -o $R/prof/acc_$r.dlscope -- $ACC bench/accelerate_train.py --steps $s \
--times-out $R/acc_prof_$r > $R/acc_prof_$r.log 2>&1"
    post "advise $r" "$D advise $R/prof/acc_$r.dlscope --format json > $R/acc_advise_$r.json; \
$D stats $R/prof/acc_$r.dlscope --report rank_waits --format json > $R/acc_rank_waits_$r.json"
  done
}

part_fsdp_prefetch() {
  part fsdp_prefetch
  hostinfo
  local n=${GPUS:-4}; local env="CUDA_VISIBLE_DEVICES=$(gpus "$n")" tr; tr=$(trn "$n")
  local fix="--prefetch 2 --keep-last" fs="--fsdp --steps ${PROF_STEPS:-30}" name=fsdp$n
  runsh "profiled base" 150 0 "$env $P -o $R/prof/${name}_base.dlscope -- $tr $DIST $fs > $R/${name}_base.log 2>&1"
  post "advise base" "$D advise $R/prof/${name}_base.dlscope --format json > $R/${name}_base_advise.json"
  for r in $(rounds 3); do
    enough 200 || break
    runsh "base $r" 70 0 "$env $tr $DIST --fsdp --steps ${STEPS:-40} --times-out $R/${name}_t_base_$r.json > /dev/null 2>&1"
    runsh "fix $r" 70 0 "$env $tr $DIST --fsdp --steps ${STEPS:-40} $fix --times-out $R/${name}_t_fix_$r.json \
> /dev/null 2>&1"
  done
  pack fsdp_prefetch
  if enough 190; then
    runsh "profiled fix" 150 0 "$env $P -o $R/prof/${name}_fix.dlscope -- $tr $DIST $fs $fix > $R/${name}_fix.log 2>&1"
    post "advise fix" "$D advise $R/prof/${name}_fix.dlscope --format json > $R/${name}_fix_advise.json"
  fi
}

part_two_launch() {
  part two_launch
  local n=${GPUS:-4} pr=/tmp/gpu_run/two_launch_prof args="--steps ${STEPS:-40}" r h port rep
  local per=$(( n / 2 )) pids
  [ -n "${DRY:-}" ] || { rm -rf "$pr"; mkdir -p "$pr"; }
  for r in $(rounds 3); do
    enough 150 || { log "round $r: skipped"; break; }
    port=$(( 29600 + r )); pids=()
    for h in 0 1; do
      runsh "round $r: launch $h of 2" 120 0 "$P -o $pr/two${r}_h$h.dlscope -- python3 -m torch.distributed.run \
--nnodes 2 --node-rank $h --nproc-per-node $per --master-addr 127.0.0.1 --master-port $port $DIST $args \
--gpu-offset $(( per * h )) > $R/two${r}_h$h.log 2>&1" &
      pids+=($!)
    done
    # the launches by their PIDs: a bare `wait` also waits for gpu_lib's `tee` (bash 5.1 waits for the
    # last process substitution), which never ends
    wait "${pids[@]}"
    post "round $r: merge" "$D merge $pr/two${r}_h0.dlscope $pr/two${r}_h1.dlscope -o $pr/two$r.dlscope -f \
> $R/two${r}_merge.log 2>&1; cat $R/two${r}_merge.log"
    runsh "round $r: one launch" 120 20 "$P -o $pr/one$r.dlscope -- $(trn "$n") $DIST $args > $R/one$r.log 2>&1"
    for rep in comm_sum collective_overlap overlap straggler; do
      post "round $r: $rep" "$D stats $pr/two$r.dlscope --report $rep --format json > $R/two${r}_$rep.json \
2> $R/two${r}_$rep.err; $D stats $pr/one$r.dlscope --report $rep --format json > $R/one${r}_$rep.json 2> $R/one${r}_$rep.err"
    done
    # the merged and the one-launch profile travel back, one tarball a round (the host profiles are
    # in the merge)
    post "round $r: pack" "rm -rf $pr/two${r}_h0.dlscope $pr/two${r}_h1.dlscope; \
tar -czf $OUT/two_launch_prof$r.tar.gz -C $pr two$r.dlscope one$r.dlscope"
    pack two_launch
  done
}

part_small_collectives() {
  part small_collectives
  local n=${GPUS:-2}; local env="CUDA_VISIBLE_DEVICES=$(gpus "$n")" tr gs; tr=$(trn "$n")
  local sc="--width ${WIDTH:-128} --seq 128 --layers 6 --steps ${STEPS:-60}"
  for r in $(rounds 2); do
    for gs in naive bucketed; do
      runsh "$gs $r" 60 0 "$env $tr $DIST $sc --grad-sync $gs --times-out $R/sc_${gs}_$r.json > $R/sc_${gs}_$r.log 2>&1"
    done
  done
  runsh "profiled naive" 90 0 "$env $P -o $R/prof/small_naive.dlscope -- $tr $DIST $sc --grad-sync naive \
--times-out $R/sc_prof.json > $R/small.log 2>&1"
  post advise "$D advise $R/prof/small_naive.dlscope --format json > $R/small_advise.json"
}

part_modules() {
  part modules
  runsh "module view" 480 0 "python3 bench/programs/module_view_gpu.py --steps ${STEPS:-30} --rounds ${ROUNDS:-3} \
-o $R/prof > $R/modules.log 2>&1; mv $R/prof/module_view_gpu.json $R/"
}

part_roofline_ncu() {
  part roofline_ncu
  for m in ${NCU_MODELS:-gpt cnn}; do
    runsh "roofline vs ncu $m" 300 10 "python3 bench/roofline_vs_ncu.py --model $m --variant ${NCU_VARIANT:-fused_opt} \
--step ${NCU_STEP:-2} --ncu-timeout ${NCU_TIMEOUT:-230} -o $R/prof > $R/roofline_ncu_$m.txt 2>&1; mv $R/prof/roofline_ncu_$m.json $R/; \
gzip -c $R/prof/ncu_$m.csv > $R/ncu_$m.csv.gz; rm -f $R/prof/ncu_$m.csv"
  done
}

part_try_gpus() {
  part try_gpus
  hostinfo
  runsh "try --gpus" 400 10 "$D try --gpus ${TRY_GPUS:-auto} --fixes ${FIXES:-fused_opt,tf32} --repeat ${ROUNDS:-4} \
--steps ${STEPS:-15} --no-combined --format json -o /tmp/try_gpus_runs -- python3 $TRAIN --model ${MODEL:-mlp} \
--variant baseline --steps 200 > $R/try_gpus.json 2> $R/try_gpus.log; echo rc=\$? >> $R/try_gpus.log"
  post files "ls -la /tmp/try_gpus_runs > $R/try_gpus_files.txt"
}

part_bert_try() {
  part bert_try
  for i in $(seq 1 ${BARE_RUNS:-2}); do  # the unchanged program's own spread, untraced
    run "bare $i" 90 200 python3 bench/programs/bert_like.py --steps 40 --times-out "$R/bare_$i.json"
  done
  local t=$(date +%s)
  runsh "try auto" 420 10 "$D try --fixes auto --gpus ${TRY_GPUS:-auto} --format json -o /tmp/bert_try_runs -- \
python3 bench/programs/bert_like.py --steps 400 > $R/bert_try.json 2> $R/bert_try.log; echo rc=\$? >> $R/bert_try.log"
  [ -n "${DRY:-}" ] || { log "try auto: $(( $(date +%s) - t )) s wall"; echo "wall_s=$(( $(date +%s) - t ))" >> "$R/bert_try.log"; }
  post advise "ls -la /tmp/bert_try_runs > $R/bert_try_files.txt; cp -r /tmp/bert_try_runs/baseline.0.dlscope $R/prof/; \
$D advise $R/prof/baseline.0.dlscope --format json > $R/bert_advise.json 2>&1; \
python3 bench/try_run_phases.py /tmp/bert_try_runs -o $R/bert_try_phases.json > $R/bert_try_phases.log 2>&1"
}

part_defer_sync() {
  part defer_sync
  # HOST_MS of Python a step before the GPU's work (WIDTH x 8 layers, batch 1024): the host work that a sync
  # every step keeps from running under the GPU's (the probe of 2026-11-28 14:04 had none: no finding)
  local probe="PROBE_DEVICE=cuda PROBE_STEPS=80 PROBE_PRINT_EVERY=20 PROBE_HOST_MS=${HOST_MS:-4} PROBE_WIDTH=${WIDTH:-2048}"
  runsh "try auto + defer_sync on the probe" 240 10 "env $probe $D try --fixes auto,defer_sync --steps 20 \
--max-rounds ${ROUNDS:-4} --no-combined -o /tmp/defer.try --format json -- python3 tests/programs/defer_probe.py /tmp/p.json \
> $R/defer_auto.json 2> $R/defer_auto.log"
  post advise "$D advise /tmp/defer.try/baseline.0.dlscope > $R/defer_advise.txt 2>&1"
  [ -z "${NAN_CHECK:-}" ] || runsh "defer_sync, NaN check" 150 10 "env $probe PROBE_NAN_CHECK=1 $D try --fixes defer_sync \
--steps 20 --repeat 3 -o /tmp/defer_nan.try --format json -- python3 tests/programs/defer_probe.py /tmp/p.json \
> $R/defer_nan.json 2> $R/defer_nan.log"
}

part_startup() {
  part startup
  # where a run's start-up goes (issue 38: what try can do ahead of a run's turn): the BERT-like program's
  # set-up stage by stage, bare twice, then under `dlscope profile` (default mode) once
  for r in 1 2; do
    run "startup bare $r" 60 10 python3 bench/startup_probe.py -o "$R/startup_bare_$r.json"
  done
  runsh "startup profiled" 90 10 "$P -o /tmp/startup.dlscope -- python3 bench/startup_probe.py -o $R/startup_prof.json \
> $R/startup_prof.log 2>&1"
}

part_queue_depth() {
  part queue_depth
  run "queue depth" 120 5 python3 bench/queue_depth.py -o "$R/queue_depth.json"
}

part_try_one_gpu() {
  part try_one_gpu
  # the runs of one GPU in one queue, each started ahead (2026-11-28): the same try as issue 37's
  # before/after check (results/gpu_try_move), its intervals to overlap those
  runsh "try bf16 on one GPU" 300 10 "$D try --fixes bf16 --no-combined --repeat 3 --steps 20 -f --format json \
-o /tmp/try_one -- python3 bench/advice_truth/train.py --model gpt --steps 100000 > $R/try_one.json 2> $R/try_one.log"
}

part_jax_unannotated() {
  part jax_unannotated
  # JAX takes 75% of the GPU's memory at its first array unless told not to (bench/gpu_jaxncu.py's ENV)
  local env="XLA_PYTHON_CLIENT_PREALLOCATE=false" prog="python3 bench/programs/jax_unannotated.py --steps ${STEPS:-60}${SMALL:+ --small}"
  local prof=$R/prof/jax.dlscope
  post versions "python3 -c 'import jax, jaxlib, flax, optax; print(\"jax\", jax.__version__, \"jaxlib\", \
jaxlib.__version__, \"flax\", flax.__version__, \"optax\", optax.__version__, jax.devices())' > $R/versions.txt 2>&1; \
tail -n 3 $R/versions.txt"
  # the program untraced: its own steps without dlscope (the first ones compile)
  runsh bare 150 200 "$env $prog --times-out $R/bare_times.json > $R/bare.log 2>&1; tail -n 2 $R/bare.log"
  # no step annotation: the JAX layer traces the whole run, every call of the step (no --mode full needed)
  runsh profiled 300 20 "$env $P -o $prof -- $prog --times-out $R/prof_times.json > $R/prof.log 2>&1; tail -n 2 $R/prof.log"
  post check "python3 bench/jax_steps_check.py $prof $R/prof_times.json --bare $R/bare_times.json --skip ${SKIP:-5} \
-o $R/check.json"
  post reports "$D summary $prof --format json > $R/summary.json 2> $R/summary.err; $D advise $prof --format json \
> $R/advise.json 2> $R/advise.err; $D stats $prof --report step_sum --format json > $R/step_sum.json 2> $R/step_sum.err; \
$D summary $prof | head -30"
}

part_nccl_timeout() {
  part nccl_timeout
  # rank 1 hangs in step 15; rank 0 reads its loss each step (--item), so its host waits in that step's
  # all-reduce, where NCCL's watchdog times it out after --timeout-s and ends the process
  for eh in ${HANDLING:-1 3}; do
    runsh "hang, TORCH_NCCL_ASYNC_ERROR_HANDLING=$eh" 150 10 "TORCH_NCCL_ASYNC_ERROR_HANDLING=$eh $P \
-o $R/prof/nccl_to_$eh.dlscope -- $(trn 2) tests/programs/ddp_dies.py --backend nccl --steps 40 --die-at 15 --how hang \
--item --timeout-s 10 --step-s 0.05 > $R/run_$eh.log 2>&1; echo exit=\$? >> $R/run_$eh.log"
    post "summary $eh" "$D summary $R/prof/nccl_to_$eh.dlscope > $R/summary_$eh.txt 2>&1; $D sql $R/prof/nccl_to_$eh.dlscope \
'SELECT rank, count(*) AS steps, min(step), max(step) FROM steps GROUP BY rank ORDER BY rank' >> $R/summary_$eh.txt 2>&1"
  done
}

PARTS="queue_depth startup jax_unannotated nccl_timeout defer_sync try_one_gpu bert_try roofline_ncu try_gpus hooks full_cost marks batch_truth integrations profile_cost try_vs_measure cnn_truth heldout ncu_cupy modules fuzz dist \
straggler_forward accelerate fsdp_prefetch two_launch small_collectives"
if [ $# -eq 0 ]; then sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0; fi
for p in "$@"; do
  declare -F "part_$p" > /dev/null || { echo "gpu_run.sh: no part '$p' (parts: $PARTS)" >&2; exit 2; }
done
start
for p in "$@"; do "part_$p"; pack "$p"; done
PART=""
log done
