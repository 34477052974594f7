#!/usr/bin/env bash
# One call on a lent H200: the GPU half of the hostile suite (with the tuned kernels' headline
# verdicts as honest controls), the tuned kernels at their extra shapes, and a short tuner run.
# Usage (device tool, carry .device-bundle): bash bench/h200_session.sh "$OUT"
out=${1:?output dir}
bash .device-bundle/install.sh && export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1 MARATHON_TRITON_CACHE=/tmp/marathon-tc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 bench/hostile_gpu.py --budget 165 --out "$out/hostile_gpu.json"
timeout 60 python3 bench/evaluate_kernels.py --problem mla_decode --kernel tuned --shape B=32,H=128,S=8192 --tag b32 --out "$out"
timeout 80 python3 bench/evaluate_kernels.py --problem kda --kernel tuned --shape B=8,T=4096,H=32,K=128,V=128 --shape B=1,T=32768,H=32,K=128,V=128 --tag long --out "$out"
timeout 110 python3 marathon.py run --problem mla_decode --kernel starter --policy tuner --device cuda --hours 0.022 --json > "$out/tuner_mla_decode_h200.json"
echo "tuner exit $?"
