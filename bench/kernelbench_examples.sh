#!/usr/bin/env bash
# The README's three file problems (docs/examples: elementwise, row reduction, GEMM + epilogue) judged
# on a GPU with their honest Triton candidates, at the files' own sizes, against Model in eager mode
# and under torch.compile. One verdict JSON per problem and dtype in OUT_DIR.
#   bash bench/kernelbench_examples.sh OUT_DIR [DTYPE...]   (default dtypes: bfloat16 float32)
set -u
out=${1:?OUT_DIR}; shift
dtypes=${*:-bfloat16 float32}
mkdir -p "$out"
for dtype in $dtypes; do
  for p in silu_scale rms_norm linear_gelu; do
    python3 marathon.py eval --problem docs/examples/$p.py --kernel docs/examples/${p}_kernel.py \
      --device cuda --dtype "$dtype" --json > "$out/${p}_${dtype}_h200.json"
    echo "$p $dtype: exit $?"
  done
done
