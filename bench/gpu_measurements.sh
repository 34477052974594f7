#!/usr/bin/env bash
# The project's named GPU measurements, for any CUDA host with the project's dependencies installed.
# Usage: bash bench/gpu_measurements.sh OUT_DIR MEASUREMENT [MEASUREMENT ...]   (--help: this text)
# Each measurement writes under OUT_DIR and is bounded by `timeout` to under 10 minutes, so one that hangs
# never holds the GPU for the ones after it. MARATHON_GPU_SETUP, if set, is a command run first to prepare
# the environment (e.g. `bash .offline-bundle/install.sh` on a host without network: deploy/README.md).
# What the committed figures came from: bench/results/h200/README.md.
#   integrity      the whole GPU half of the hostile suite (honest controls first), then the KDA tuned
#                  kernel against FLA's chunk_kda at the three headline shapes, in one evaluation
#   lowp           the MLA precision-downcast hostile item alone (with the control)
#   mla            what the L2 flush costs a timed call (yardsticks, the tuned kernel, the baselines),
#                  then a tuner run over the MLA starter's search space (~4.5 minutes)
#   tuner-kda      a tuner run on KDA from the tuned kernel (~6 minutes), FLA timed in every profile
#   tuner-mla-all  the MLA starter's whole space (12 configurations; stops when exhausted)
#   tuner-kda-all  the KDA starter's whole space (16 configurations; stops when exhausted)
#                  (the tuner measurements keep their artifact store, every full verdict with its flags,
#                  packed as OUT_DIR/artifacts.tgz: its content-addressed folders nest deeply)
#   kda-shapes     KDA tuned vs FLA at the three headline shapes, one evaluation per shape (FLA only)
#   mla-sweep      MLA tuned on the whole sweep (correctness on the GPU, timings, no baselines)
#   kda-long       KDA tuned vs FLA at B=1,T=32768 alone (FLA only: torch_chunked is ~1 s a call there)
#   kda-scan-speed the shipped WY scan against the transition-form scan alone (bench/kda_scan_forms.py)
#   tuner-kda-start / tuner-kda-resume  the KDA starter's whole space across two machines, the way a
#                  run outlives a lost machine: start runs `marathon dev` (SQLite state, one evaluation
#                  worker per GPU, as many configurations at once as GPUs) and the run for up to ~8
#                  minutes, then stops the server and packs its state directory as OUT_DIR/state.tgz;
#                  resume unpacks $MARATHON_STATE_ARCHIVE (that file, copied to the next machine), starts
#                  `marathon dev` on the same state and follows the run to its report
#   kda-forms      bench/kda.py --preset forms: the FORMS_PREP / FORMS_SCAN changes to the shipped CONFIG
#                  timed alone, the pick end to end beside FLA, then judged at B=1,T=8192 (~160 s)
#   kda-pick-shapes  after kda-forms on the same OUT_DIR: its pick (kda_tune.json's best), if it is not
#                  the shipped CONFIG, judged against FLA at the three headline shapes in one evaluation
#   kda-sweep      KDA tuned on the whole sweep shape set (correctness on the GPU at T not a multiple of
#                  the chunk and K=V=64, timings, no baselines)
#   kda-scan-nt1   bench/kda_scan_nt1.py: the scan alone on one chunk, NT specialized and not (the
#                  one-chunk miscompile of kernels/problems/kda/NOTES.md in its smallest known form)
#   kda-partial    bench/kda_partial_chunks.py: the tuned kernel's error per 16-row block at one-chunk and
#                  odd lengths, by CONFIG change (~2 min)
#   mla-tune       bench/mla_decode.py tune: MLA stage 1 in both FORMs (heads or cache rows as the products'
#                  M), split counts, merge shapes and PDL, timed as CUDA graphs after an L2 flush (~4.5 min)
#   mla-breakdown  bench/mla_decode.py breakdown --part configs: B=1 time split between stage 1 and the merge,
#                  per configuration of BREAKDOWN
#   mla-streams    stage 1's cache stream at its grids without the math, and the shipped stage 1 on fixed
#                  grids (32 and 64 splits) as S grows from 1,024 to 32,768
#   throughput     bench/throughput.py: judged candidates per GPU-hour and seconds per verdict by phase, MLA
#                  and KDA tuned at the bench shapes, first / cold / warm evaluations, baselines reused (~4.5 min)
#   peaks          bench/device_peaks.py: bf16 GEMM TFLOP/s, MLA's two products at B=32 by cuBLAS alone, copy TB/s
#   ncu            Nsight Compute: profile_kernel's path through the sandbox, then the tuned kernels'
#                  detailed reports (stall reasons, occupancy, memory) outside it (bench/ncu_probe.py)
#   ncu-fences     ncu through the sandbox with each OS fence off in turn (bench/ncu_probe.py --fences)
#   ncu-source     metrics per SASS instruction of the KDA preparation and MLA stage 1 (bench/ncu_probe.py
#                  --source; summarize with bench/ncu_sass_summary.py)
#   ncu-source-mla the MLA half of ncu-source alone
#   examples       the README's three file problems in bf16 against eager and torch.compile, as records
#                  (bench/kernelbench_examples.sh)
#   kernelbench-softmax  KernelBench's own level1 23_Softmax.py (from $KERNELBENCH_ROOT, a KernelBench checkout)
#                  at its own size, 4096 x 393216, judged with bench/candidates/softmax_rows_kernel.py against
#                  eager and torch.compile
#   confinement    bench/gpu_confinement.py: fences up, a foreign process on the GPU, hostile candidates and problem files
#   pidns          bench/pid_namespace_cuda.py: CUDA and Triton inside the sandbox's PID namespace, step by step
#   mla-regimes    MLA tuned at B in $MLA_BATCHES (default 1 4 32) x H in 16 64 128 x S in 1024 8192 65536,
#                  one `marathon eval` per B against torch and torch.compile, each a result record
#   mla-plans      bench/mla_decode.py plans: launch-plan variants of the tuned kernel on every regime shape
#   mla-pick       bench/mla_decode.py pick: regime variants (PICK_SMALL, PICK_LARGE) on every regime shape and
#                  the plan rule scored against torch.compile's recorded times; --write puts the pick's CONFIG
#                  into tuned.py, so mla-regimes and mla-sweep after it on the same host judge the pick
#   mla-width      bench/mla_decode.py breakdown --part width: at B=1, the cache stream and stage 1 with its
#                  merge at grids of up to ~1,000 programs
#   tuner-mla-state the tuner over the MLA starter's whole space through `marathon dev`, its state
#                  directory packed as OUT_DIR/state-mla.tgz, from which `marathon report` is made anywhere
case ${1:-} in -h|--help|"") sed -n '2,/^case /p' "$0" | sed '$d' | cut -c3-; exit 0 ;; esac
out=${1:?output dir}; shift
for step in "$@"; do  # refuse a misspelt name before any GPU time is spent
  case " integrity lowp mla tuner-kda tuner-mla-all tuner-kda-all kda-shapes kda-sweep kda-scan-nt1 kda-partial mla-sweep kda-long tuner-kda-start tuner-kda-resume kda-scan-speed mla-tune mla-breakdown mla-streams ncu-source-mla examples kernelbench-softmax confinement pidns mla-regimes mla-plans mla-pick mla-width tuner-mla-state kda-pick-shapes kda-forms ncu-fences ncu-source peaks ncu throughput " in *" $step "*) ;; *) echo "unknown measurement: $step (--help lists them)" >&2; exit 2 ;; esac
done
if [ -n "${MARATHON_GPU_SETUP:-}" ]; then eval "$MARATHON_GPU_SETUP" || exit 1; fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 MARATHON_TRITON_CACHE=/tmp/marathon-tc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# the store's content-addressed folders nest deeply: one archive is easier to copy off the host
pack_artifacts() { tar czf "$out/artifacts.tgz" -C "$out" artifacts && rm -rf "$out/artifacts/sha256"; }
KDA_SHAPES=(--shape B=1,T=8192,H=32,K=128,V=128 --shape B=8,T=4096,H=32,K=128,V=128
            --shape B=1,T=32768,H=32,K=128,V=128)
for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    integrity)
      timeout 320 python3 bench/hostile_gpu.py --budget 270 --out "$out/hostile_gpu.json"
      timeout 220 python3 bench/evaluate_kernels.py --problem kda --kernel tuned "${KDA_SHAPES[@]}" \
        --tag headline --out "$out" ;;
    lowp)  # one hostile item again, after a fix to the item itself
      timeout 150 python3 bench/hostile_gpu.py --only mla_lowp_accumulation --budget 120 --out "$out/hostile_gpu_lowp.json" ;;
    mla)
      timeout 150 python3 bench/mla_decode.py study --out "$out"
      timeout 360 python3 marathon.py run --problem mla_decode --kernel starter --policy tuner --device cuda \
        --hours 0.075 --json > "$out/tuner_mla_decode.json"; echo "tuner exit $?" ;;
    tuner-kda)
      timeout 450 python3 marathon.py run --problem kda --kernel tuned --policy tuner --device cuda \
        --hours 0.1 --json > "$out/tuner_kda.json"; echo "tuner exit $?" ;;
    tuner-mla-all)
      timeout 400 python3 marathon.py run --problem mla_decode --kernel starter --policy tuner --device cuda \
        --hours 0.1 --artifacts "$out/artifacts" --json > "$out/tuner_mla_decode_all.json"; echo "tuner exit $?"
      pack_artifacts ;;
    tuner-kda-all)
      timeout 545 python3 marathon.py run --problem kda --kernel starter --policy tuner --device cuda \
        --hours 0.145 --artifacts "$out/artifacts" --json > "$out/tuner_kda_all.json"; echo "tuner exit $?"
      pack_artifacts ;;
    kda-shapes)
      for shape in B=1,T=8192 B=8,T=4096 B=1,T=32768; do
        timeout 200 python3 bench/evaluate_kernels.py --problem kda --kernel tuned --shape "$shape,H=32,K=128,V=128" \
          --baseline fla_chunk_kda --tag "${shape//[=,]/_}" --out "$out"
      done ;;
    kda-sweep)  # without baselines: with them the sweep did not finish in 420 s on an H200
      timeout 480 python3 marathon.py eval --problem kda --kernel tuned --device cuda --shapes sweep \
        --no-baselines --json > "$out/kda_tuned_sweep.json"; echo "eval exit $?" ;;
    kda-scan-nt1)
      timeout 200 python3 bench/kda_scan_nt1.py --out "$out" ;;
    kda-partial)
      timeout 300 python3 bench/kda_partial_chunks.py --out "$out" --workers 8 > "$out/kda_partial_chunks.txt" 2>&1
      echo "exit $?"; grep -c "rel 0.00" "$out/kda_partial_chunks.txt"; grep -v "rel 0.00" "$out/kda_partial_chunks.txt" | head -40 ;;
    mla-sweep)
      timeout 170 python3 marathon.py eval --problem mla_decode --kernel tuned --device cuda --shapes sweep \
        --no-baselines --json > "$out/mla_decode_tuned_sweep.json"; echo "eval exit $?" ;;
    kda-long)
      timeout 200 python3 bench/evaluate_kernels.py --problem kda --kernel tuned --shape B=1,T=32768,H=32,K=128,V=128 \
        --baseline fla_chunk_kda --tag B_1_T_32768 --out "$out" ;;
    tuner-kda-start)
      state=/tmp/marathon-state
      python3 marathon.py dev --state-dir "$state" --gpus auto > "$out/dev_start.log" 2>&1 & dev=$!
      for _ in $(seq 120); do grep -q serving "$out/dev_start.log" && break; sleep 1; done
      python3 marathon.py run --address localhost:7233 --problem kda --kernel starter --policy tuner --device cuda \
        --hours 0.5 --parallel "$(nvidia-smi -L | wc -l)" --workflow-id kda-resumable --detach
      timeout 470 python3 marathon.py follow --address localhost:7233 --workflow-id kda-resumable --json \
        > "$out/tuner_kda_resumable.json"; echo "follow exit $?"
      kill -INT $dev; wait $dev
      tar czf "$out/state.tgz" -C "$state/.." "$(basename "$state")"; ls -la "$out/state.tgz" ;;
    tuner-kda-resume)
      state=/tmp/marathon-state
      tar xzf "${MARATHON_STATE_ARCHIVE:?the state.tgz a tuner-kda-start left}" -C "$(dirname "$state")"
      python3 marathon.py dev --state-dir "$state" --gpus auto > "$out/dev_resume.log" 2>&1 & dev=$!
      for _ in $(seq 120); do grep -q serving "$out/dev_resume.log" && break; sleep 1; done
      timeout 300 python3 marathon.py follow --address localhost:7233 --workflow-id kda-resumable --json \
        > "$out/tuner_kda_resumable.json"; echo "follow exit $?"
      kill -INT $dev; wait $dev
      tar czf "$out/artifacts.tgz" -C "$state" artifacts ;;
    examples)
      timeout 300 bash bench/kernelbench_examples.sh "$out" bfloat16 ;;
    kernelbench-softmax)
      file="${KERNELBENCH_ROOT:?a KernelBench checkout}/KernelBench/level1/23_Softmax.py"
      [ -f "$file" ] || file="$KERNELBENCH_ROOT/level1/23_Softmax.py"
      cmd="python3 marathon.py eval --problem $file --kernel bench/candidates/softmax_rows_kernel.py --device cuda --timeout 400 --json"
      timeout 540 $cmd > "$out/kernelbench_softmax.verdict.json"; echo "eval exit $?"
      python3 bench/record_verdict.py "$out/kernelbench_softmax.verdict.json" --command "$cmd" \
        --measurement "KernelBench level1 23_Softmax.py, untouched, at its own size (4096 x 393216, float32) with an honest Triton candidate against eager and torch.compile" \
        --out "$out/kernelbench_softmax.json" ;;
    pidns)
      timeout 540 python3 bench/pid_namespace_cuda.py --out "$out/pid_namespace_cuda.figures.json"; echo "exit $?"
      python3 bench/record_verdict.py "$out/pid_namespace_cuda.figures.json" --figures \
        --measurement "CUDA and a Triton kernel in a bare process, in the sandbox's PID namespace with and without its mount namespace, and the fence probe judged with the PID namespace alone and with every fence" \
        --command "python3 bench/pid_namespace_cuda.py" --out "$out/pid_namespace_cuda.json" ;;
    confinement)
      timeout 540 python3 bench/gpu_confinement.py --out "$out/gpu_confinement.figures.json"; echo "exit $?"
      python3 bench/record_verdict.py "$out/gpu_confinement.figures.json" --figures \
        --measurement "evaluator confinement on a GPU: fences, a foreign process on the GPU, a snooping candidate, a hostile problem file and candidate, an honest file problem with baselines" \
        --command "python3 bench/gpu_confinement.py" --out "$out/gpu_confinement.json" ;;
    mla-regimes)
      for b in ${MLA_BATCHES:-1 4 32}; do
        shapes=(); for h in 16 64 128; do for s in 1024 8192 65536; do shapes+=(--shape "B=$b,H=$h,S=$s"); done; done
        cmd="python3 marathon.py eval --problem mla_decode --kernel tuned --device cuda --timeout 240 ${shapes[*]} --json"
        timeout 280 $cmd > "$out/mla_regimes_B$b.verdict.json"; echo "B=$b: exit $?"
        python3 bench/record_verdict.py "$out/mla_regimes_B$b.verdict.json" --command "$cmd" \
          --measurement "mla_decode tuned at B=$b over H in 16,64,128 and S in 1024,8192,65536 against torch and torch.compile" \
          --out "$out/mla_decode_tuned_regimes_B$b.json"
      done ;;
    mla-plans)
      timeout 500 python3 bench/mla_decode.py plans --out "$out" > "$out/mla_plans.log" 2>&1; echo "exit $?"
      tail -3 "$out/mla_plans.log" ;;
    mla-pick)
      timeout 250 python3 bench/mla_decode.py pick --out "$out" --write --workers 14 --reps 20 --budget-s 170 \
        > "$out/mla_pick.log" 2>&1; echo "exit $?"
      sed -n '/^pick:/,$p' "$out/mla_pick.log" ;;
    mla-width)
      timeout 150 python3 bench/mla_decode.py breakdown --part width --out "$out" ;;
    tuner-mla-state)
      state=/tmp/marathon-state-mla
      python3 marathon.py dev --state-dir "$state" --gpus auto > "$out/dev_mla.log" 2>&1 & dev=$!
      for _ in $(seq 120); do grep -q serving "$out/dev_mla.log" && break; sleep 1; done
      python3 marathon.py run --address localhost:7233 --problem mla_decode --kernel starter --policy tuner \
        --device cuda --hours 0.1 --workflow-id mla-tuner-gpu --detach
      timeout 400 python3 marathon.py follow --address localhost:7233 --workflow-id mla-tuner-gpu --json \
        > "$out/tuner_mla_state.json"; echo "follow exit $?"
      kill -INT $dev; wait $dev
      tar czf "$out/state-mla.tgz" -C "$state/.." "$(basename "$state")"; ls -la "$out/state-mla.tgz" ;;
    kda-scan-speed)
      timeout 45 python3 bench/kda_scan_forms.py speed --out "$out/kda_scan_speed.json" ;;
    mla-tune)  # stage-1 variants (both FORMs) x split counts per regime, then merge/PDL; the pick's diagnosis
      timeout 290 python3 bench/mla_decode.py tune --budget-s 460 --out "$out" ;;
    mla-breakdown)  # B=1: the whole call, stage 1 alone and the merge alone, per configuration
      timeout 150 python3 bench/mla_decode.py breakdown --part configs --out "$out" ;;
    mla-streams)  # stage 1's cache stream without its math (STREAMS), and the shipped stage 1 as S grows (SCALING_*)
      timeout 200 python3 bench/mla_decode.py breakdown --part streams --part scaling --out "$out" ;;
    ncu-source-mla)  # per-SASS-instruction warp stall samples of MLA stage 1 alone
      timeout 120 python3 bench/ncu_probe.py --out "$out" --source _mla_split_kernel --problem mla_decode ;;
    kda-pick-shapes)  # kda-forms' pick at the three headline shapes, unless it is what is shipped
      best=$(python3 -c "import json; from kernels.problems.kda.tuned import CONFIG
b = json.load(open('$out/kda_tune.json'))['best']; print('' if b == CONFIG else json.dumps(b))")
      if [ -z "$best" ]; then echo "the pick is the shipped CONFIG: nothing to judge"
      else mkdir -p "$out/pick"; timeout 320 python3 bench/kda.py eval --kernel tuned --config "$best" --shapes 3 \
        --budget-s 300 --timeout 280 --out "$out/pick"; fi ;;
    kda-forms)  # FORMS_PREP / FORMS_SCAN of bench/kda.py, the pick end to end beside FLA, then judged at B=1,T=8192
      timeout 270 python3 bench/kda.py all --preset forms --shapes 1 --kernel tuned --budget-s 230 --out "$out" ;;
    ncu-fences)  # which of the sandbox's fences stops ncu's injection (the candidate died with SIGSEGV)
      timeout 100 python3 bench/ncu_probe.py --out "$out" --fences --problem kda ;;
    ncu-source)  # per-SASS-instruction metrics (warp stall samples) of the KDA preparation and MLA stage 1
      timeout 120 python3 bench/ncu_probe.py --out "$out" --source _kda_prep
      timeout 120 python3 bench/ncu_probe.py --out "$out" --source _mla_split_kernel --problem mla_decode ;;
    throughput)  # the worker's evaluations back to back: judges on demand, then started ahead of need
      timeout 330 python3 bench/throughput.py --device cuda --kernel tuned --cold 1 --warm 2 \
        --out "$out/throughput.json"; echo "throughput exit $?" ;;
    peaks)  # the GPU's own bf16 GEMM rate, MLA's B=32 products done by cuBLAS alone, a device copy
      timeout 120 python3 bench/device_peaks.py --out "$out/device_peaks.json" ;;
    ncu)
      # KDA first: its preparation is the kernel whose bound matters most (kernels/problems/kda/NOTES.md)
      timeout 300 python3 bench/ncu_probe.py --out "$out" --problem kda --problem mla_decode ;;
  esac
done
echo "=== done $(date -u +%H:%M:%S)"
