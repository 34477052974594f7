"""On a GPU: the confinement of the evaluator's processes (kernels/evaluator/confinement.py, kernels/evaluator/gpu_quiet.py).

    python bench/gpu_confinement.py [--out .marathon/bench/gpu_confinement.json]

1. The MLA starter through evaluate(), every fence up (the root sandbox without capabilities):
   status ok, which fences took, the gpu_wait phase.
2. The same while a foreign process holds a CUDA context on the GPU, with a 6 s bound: the verdict's
   gpu_shared names it and says the timing went ahead beside it.
3. A hostile candidate past the static policy snoops /proc and the files for a key held by this
   (non-dumpable) process: the key is in no verdict.
Its record: bench/results/h200/gpu_confinement.json."""
from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from kernels.evaluator.confinement import make_non_dumpable
from kernels.evaluator.evaluate import evaluate, request_for

ROOT = Path(__file__).resolve().parent.parent

HOG = "import torch, time\nx = torch.ones(1 << 20, device='cuda')\nprint('ready', flush=True)\ntime.sleep(600)\n"


def summary(v) -> dict:
    return {"status": v.status, "reason": v.reason[-600:], "sandbox": v.sandbox, "gpu_shared": v.gpu_shared,
            "phases_s": v.phases_s, "flags": v.flags, "latency_us": [s.latency_us for s in v.shapes]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / ".marathon" / "bench" / "gpu_confinement.json"))
    args = ap.parse_args()
    key = "sk-marathon-gpu-" + secrets.token_hex(12)
    os.environ["MARATHON_TEST_SECRET"] = key  # the judge is started from this environment
    make_non_dumpable()
    out: dict = {}
    shapes = [{"B": 4, "H": 16, "S": 1024}]
    req = request_for("mla_decode", "starter", device="cuda", shapes=shapes, mode="full", baselines=False,
                      timeout_s=300)
    t0 = time.monotonic()
    out["starter"] = summary(evaluate(req))
    out["starter"]["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out["starter"], indent=1), flush=True)

    hog = subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE, text=True)
    hog.stdout.readline()
    os.environ["MARATHON_GPU_QUIET_WAIT_S"] = "6"
    try:
        out["beside_foreign_process"] = summary(evaluate(req))
        out["beside_foreign_process"]["foreign_pid"] = hog.pid
    finally:
        hog.kill()
        hog.wait()
        del os.environ["MARATHON_GPU_QUIET_WAIT_S"]
    print(json.dumps(out["beside_foreign_process"], indent=1), flush=True)

    source = (ROOT / "tests" / "hostile" / "mla_snoop_everything.py").read_text().replace("@ROOTS@", str(ROOT))
    os.environ["MARATHON_UNSAFE_SKIP_POLICY"] = "1"
    snoop = evaluate(req.model_copy(update={"source": source, "kernel": "mla_snoop_everything", "mode": "test"}))
    del os.environ["MARATHON_UNSAFE_SKIP_POLICY"]
    out["snoop"] = summary(snoop)
    out["snoop"]["key_in_verdict"] = key in snoop.model_dump_json()
    print(json.dumps(out["snoop"], indent=1), flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
