#!/usr/bin/env bash
# The GPU work of one session on a lent H200, in calls that each fit the device tool's 10 minutes.
# Usage (device tool, carry .device-bundle): bash bench/h200_session.sh "$OUT" STEP [STEP ...]
#   integrity  the whole GPU half of the hostile suite (honest controls first), then the KDA tuned
#              kernel against FLA's chunk_kda at the three headline shapes, in one evaluation
#   mla        where the L2 flush's cost goes, the MLA tuned kernel re-tuned, judged at both headline
#              shapes, then a tuner run over the MLA starter's whole search space
#   tuner-kda  a tuner run on KDA from the starter (its whole space, or as much as ~9 minutes allow)
out=${1:?output dir}; shift
bash .device-bundle/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 MARATHON_TRITON_CACHE=/tmp/marathon-tc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
KDA_SHAPES=(--shape B=1,T=8192,H=32,K=128,V=128 --shape B=8,T=4096,H=32,K=128,V=128
            --shape B=1,T=32768,H=32,K=128,V=128)
for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    integrity)
      timeout 320 python3 bench/hostile_gpu.py --budget 270 --out "$out/hostile_gpu.json"
      timeout 220 python3 bench/evaluate_kernels.py --problem kda --kernel tuned "${KDA_SHAPES[@]}" \
        --tag headline --out "$out" ;;
    mla)
      timeout 120 python3 bench/mla_decode.py study --out "$out"
      timeout 150 python3 bench/mla_decode.py tune --out "$out"
      timeout 90 python3 bench/mla_decode.py eval --kernel tuned --set headline --best-from "$out/mla_decode_tune.json" --out "$out"
      timeout 200 python3 marathon.py run --problem mla_decode --kernel starter --policy tuner --device cuda \
        --hours 0.05 --json > "$out/tuner_mla_decode_h200.json"; echo "tuner exit $?" ;;
    tuner-kda)
      timeout 560 python3 marathon.py run --problem kda --kernel starter --policy tuner --device cuda \
        --hours 0.145 --json > "$out/tuner_kda_h200.json"; echo "tuner exit $?" ;;
  esac
done
echo "=== done $(date -u +%H:%M:%S)"
