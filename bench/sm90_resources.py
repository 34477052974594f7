"""Registers, spills and MMA instructions of the MLA tuned stage-1 kernel compiled for sm_90, on a
host without a GPU (triton's bundled ptxas and cuobjdump).

    python bench/sm90_resources.py [BLOCK_H,BLOCK_N,warps,stages ...] [--out FILE]

Prints one line per variant and writes the rows as JSON (default: bench/results/mla_decode_sm90_resources.json)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = ["16,32,4,3", "16,64,4,2", "16,64,8,2", "32,32,8,2", "64,64,8,2", "64,32,8,3"]


def resources(block_h: int, block_n: int, warps: int, stages: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    from kernels.mla_decode import tuned
    sig = {"q_ptr": "*bf16", "kv_ptr": "*bf16", "ws_ptr": "*fp32", "o_ptr": "*bf16", "B": "i32", "H": "i32",
           "S": "i32", "split_len": "i32", "n_splits": "i32", "qk_scale": "fp32", "D_LAT": "constexpr",
           "D_ROPE": "constexpr", "BLOCK_H": "constexpr", "BLOCK_N": "constexpr", "SINGLE_SPLIT": "constexpr",
           "USE_PDL": "constexpr"}
    consts = {"D_LAT": 512, "D_ROPE": 64, "BLOCK_H": block_h, "BLOCK_N": block_n, "SINGLE_SPLIT": False,
              "USE_PDL": True}
    kernel = triton.compile(triton.compiler.ASTSource(fn=tuned._mla_split_kernel, signature=sig, constexprs=consts),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([str(tools / "cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True).stdout
    reg = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    return {"BLOCK_H": block_h, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages,
            "registers": int(reg.group(1)) if reg else None, "stack_bytes": int(stack.group(1)) if stack else None,
            "local_ld_st": len(re.findall(r"\b(?:LDL|STL)", sass)), "hmma": len(re.findall(r"\bHMMA", sass)),
            "hgmma": len(re.findall(r"\bHGMMA", sass)), "shared_bytes": kernel.metadata.shared}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", default=DEFAULT)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "mla_decode_sm90_resources.json"))
    args = ap.parse_args()
    import triton
    rows = []
    for v in args.variants:
        row = resources(*(int(x) for x in v.split(",")))
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"triton": triton.__version__, "target": "cuda sm_90", "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
