#!/usr/bin/env bash
# The README's three file problems (docs/examples: elementwise, row reduction, GEMM + epilogue) judged
# on a GPU with their honest Triton candidates, at the files' own sizes, against Model in eager mode
# and under torch.compile. For each problem and dtype, OUT_DIR gets the verdict as `marathon eval
# --json` printed it (<problem>_<dtype>.verdict.json) and that verdict as a result record
# (example_<problem>_<dtype>.json, bench/record_verdict.py).
#   bash bench/kernelbench_examples.sh OUT_DIR [DTYPE...]   (default dtypes: bfloat16 float32)
set -u
case ${1:-} in -h|--help|"") sed -n '2,7p' "$0" | cut -c3-; exit 0 ;; esac
out=$1; shift
dtypes=${*:-bfloat16 float32}
mkdir -p "$out"
for dtype in $dtypes; do
  for p in silu_scale rms_norm linear_gelu; do
    cmd="python3 marathon.py eval --problem docs/examples/$p.py --kernel docs/examples/${p}_kernel.py --device cuda --dtype $dtype --json"
    $cmd > "$out/${p}_${dtype}.verdict.json"
    echo "$p $dtype: exit $?"
    python3 bench/record_verdict.py "$out/${p}_${dtype}.verdict.json" --command "$cmd" \
      --measurement "docs/examples/$p.py ($dtype) with its Triton candidate against eager and torch.compile" \
      --out "$out/example_${p}_${dtype}.json"
  done
done
