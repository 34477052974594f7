"""Registers, spills, MMA and barrier counts of shipped kernels compiled for sm_90 (MLA stage 1, KDA preparation), on a
host without a GPU (triton's bundled ptxas and cuobjdump), specialized as the launcher specializes them at the
headline shapes (pointers and the integer arguments that are multiples of 16 marked divisible by 16).

    python bench/sm90_resources.py [BLOCK_H,BLOCK_N,warps,stages[,tokens[,prefetch]] ...] [--out FILE]   MLA stage 1
    python bench/sm90_resources.py --kda-prep [PREP_BK,PREP_BV,warps ...] [--out FILE]  KDA preparation
    python bench/sm90_resources.py --kda-scan [SCAN_BV,warps,stages[,wq[,nt_aligned]] ...] [--out FILE]  KDA scan

Prints one line per variant and writes the rows as JSON (default: .marathon/bench/mla_decode_sm90_resources.json,
or kda_prep_sm90_resources.json)."""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# MLA: BLOCK_H,BLOCK_N,warps,stages[,tokens[,prefetch]] (tokens 1: FORM "tokens", the transposed products;
# prefetch: PREFETCH, tiles ahead asked of L2)
DEFAULT = ["16,32,4,3", "16,64,4,2", "16,64,8,2", "32,32,8,2", "64,64,8,2", "64,32,8,3",
           "16,64,4,2,1", "32,64,4,2,1", "32,64,8,2,1", "64,64,8,2,1", "16,128,8,2,1", "32,128,8,1,1"]
# KDA: PREP_BK,PREP_BV,warps[,maxnreg[,wq]] (maxnreg 0: none; wq: SCAN_WQ, which also decides how the
# preparation lays out W, Qg and Kd)
KDA_DEFAULT = ["128,128,4", "64,128,4", "128,64,4", "128,128,8"]


def compiled(fn, sig: dict, consts: dict, warps: int, stages: int, maxnreg: int | None = None,
             aligned: tuple[str, ...] = (), keep_cubin: Path | None = None) -> dict:
    """Registers, spills, MMA, barrier and shared-memory instruction counts of one Triton kernel compiled
    for sm_90 (maxnreg: a register cap, as the launch option of that name sets it).

    `aligned`: the arguments Triton's launcher marks divisible by 16 at the shapes of interest (every
    pointer torch allocates; integer arguments that are multiples of 16). The launcher specializes on
    this, and without it the counts are those of another kernel: the KDA preparation compiled without
    it had 792 B of spills and scalar loads, with it 40 B and 128-bit loads, and its 7,840
    instructions are exactly those ncu listed on the H200 (kernels/problems/kda/NOTES.md, "Per instruction").
    keep_cubin: also write the cubin there (bench/ncu_sass_lines.py reads its line table)."""
    import triton
    from triton.backends.compiler import GPUTarget

    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(sig) if name in aligned}
    kernel = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages,
                                                                 **({"maxnreg": maxnreg} if maxnreg else {})})
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        if keep_cubin:
            Path(keep_cubin).write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([str(tools / "cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True).stdout
    # every SASS instruction of the kernel's body (offsets in /*0000*/ comments, then the instruction up
    # to its ';', without addresses or encodings)
    body = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(\S[^;\n]*);", sass, re.M)
    reg = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    return {"num_warps": warps, "num_stages": stages,
            "registers": int(reg.group(1)) if reg else None, "stack_bytes": int(stack.group(1)) if stack else None,
            "local_ld_st": len(re.findall(r"\b(?:LDL|STL)", sass)), "hmma": len(re.findall(r"\bHMMA", sass)),
            "hgmma": len(re.findall(r"\bHGMMA", sass)), "barriers": len(re.findall(r"\bBAR\.", sass)),
            "shared_ld_st": len(re.findall(r"\b(?:LDS|STS|LDSM)\b", sass)),
            "global_ld": len(re.findall(r"\bLDG\b", sass)),
            "instructions": len(body),
            "sass_sha1": hashlib.sha1("\n".join(body).encode()).hexdigest(),  # equal hashes: the same code
            "shared_bytes": kernel.metadata.shared}


def resources(block_h: int, block_n: int, warps: int, stages: int, tokens: int = 0, prefetch: int = 0) -> dict:
    """MLA stage 1 at one tile shape, in FORM "heads" or (tokens) "tokens", fp32 partial outputs."""
    from kernels.problems.mla_decode import tuned
    sig = {"q_ptr": "*bf16", "kv_ptr": "*bf16", "ws_ptr": "*fp32", "o_ptr": "*bf16", "B": "i32", "H": "i32",
           "S": "i32", "split_len": "i32", "n_splits": "i32", "qk_scale": "fp32", "D_LAT": "constexpr",
           "D_ROPE": "constexpr", "BLOCK_H": "constexpr", "BLOCK_N": "constexpr", "SINGLE_SPLIT": "constexpr",
           "TOKENS_M": "constexpr", "USE_PDL": "constexpr", "PREFETCH": "constexpr", "WS_INPUT": "constexpr"}
    consts = {"D_LAT": 512, "D_ROPE": 64, "BLOCK_H": block_h, "BLOCK_N": block_n, "SINGLE_SPLIT": False,
              "USE_PDL": True, "PREFETCH": prefetch, "WS_INPUT": False}
    # B is left out: at B=1 the launcher turns it into a constant instead, at B=32 it is aligned
    aligned = ("q_ptr", "kv_ptr", "ws_ptr", "o_ptr", "H", "S", "split_len", "n_splits")
    return {"FORM": "tokens" if tokens else "heads", "BLOCK_H": block_h, "BLOCK_N": block_n, "PREFETCH": prefetch,
            **compiled(tuned._mla_split_kernel, sig, {**consts, "TOKENS_M": bool(tokens)}, warps, stages,
                       aligned=aligned)}


def kda_prep_resources(prep_bk: int, prep_bv: int, warps: int, maxnreg: int | None = None, wq: bool = False,
                       keep_cubin: Path | None = None) -> dict:
    """The KDA preparation kernel at K = V = 128 (bf16 inputs, fp32 gates), with W, Qg and Kd
    interleaved for SCAN_WQ (wq) or apart."""
    from kernels.problems.kda import tuned
    sig = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr")}
    sig.update({"g_ptr": "*fp32", "beta_ptr": "*bf16"})
    sig.update({n: "*bf16" for n in ("w_ptr", "u_ptr", "qg_ptr", "kd_ptr", "m_ptr")})
    sig.update({"gl_ptr": "*fp32"})
    sig.update({"T": "i32", "H": "i32", "K": "i32", "V": "i32", "NT": "i32", "scale": "fp32"})
    sig.update({n: "constexpr" for n in ("BT", "SUB", "BK", "BVP", "PREP_BK", "PREP_BV", "KBUFS", "HEADS_FIRST",
                                         "USE_PDL")})
    consts = {"BT": 64, "SUB": 16, "BK": 128, "BVP": 128, "PREP_BK": prep_bk, "PREP_BV": prep_bv,
              "KBUFS": 3 if wq else 1, "HEADS_FIRST": False, "USE_PDL": False}
    return {"kernel": "_kda_prep", "SCAN_WQ": wq, "PREP_BK": prep_bk, "PREP_BV": prep_bv, "maxnreg": maxnreg,
            **compiled(tuned._kda_prep, sig, consts, warps, 1, maxnreg,
                       aligned=tuple(n for n, t in sig.items() if t not in ("constexpr", "fp32")), keep_cubin=keep_cubin)}


def kda_prep_args(variant: str) -> tuple:
    """kda_prep_resources' positional arguments from a variant string (see KDA_DEFAULT's comment)."""
    nums = [int(x) for x in variant.split(",")]
    return (*nums[:3], (nums[3:4] or [0])[0] or None, *(bool(x) for x in nums[4:5]))


def kda_scan_resources(bv: int, warps: int, stages: int, wq: int = 0, nt_aligned: int = 0) -> dict:
    """The KDA scan at K = V = 128 (bf16 operands) with SCAN_BV = bv, SCAN_WQ = bool(wq). NT is not
    specialized by the launcher (do_not_specialize); nt_aligned compiles it marked
    divisible by 16 as it was before, to compare the two (sass_sha1)."""
    from kernels.problems.kda import tuned
    sig = {n: "*bf16" for n in ("w_ptr", "u_ptr", "qg_ptr", "kd_ptr", "m_ptr")}
    sig.update({"gl_ptr": "*fp32", "o_ptr": "*bf16", "T": "i32", "H": "i32", "V": "i32", "NT": "i32"})
    sig.update({n: "constexpr" for n in ("BT", "BK", "BV", "BVP", "USE_PDL", "WQ")})
    consts = {"BT": 64, "BK": 128, "BV": bv, "BVP": 128, "USE_PDL": False, "WQ": bool(wq)}
    return {"kernel": "_kda_scan", "SCAN_BV": bv, "SCAN_WQ": bool(wq), "NT_aligned": bool(nt_aligned),
            **compiled(tuned._kda_scan, sig, consts, warps, stages,
                       aligned=tuple(n for n, t in sig.items() if t.startswith("*")) + ("T", "V")
                       + (("NT",) if nt_aligned else ()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", default=None)
    ap.add_argument("--kda-prep", action="store_true",
                    help="the KDA preparation kernel instead; variants are "
                    "PREP_BK,PREP_BV,warps[,maxnreg[,wq]]")
    ap.add_argument("--kda-scan", action="store_true",
                    help="the KDA scan instead; variants are SCAN_BV,warps,stages[,wq[,nt_aligned]]")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import triton
    name = "kda_prep" if args.kda_prep else "kda_scan" if args.kda_scan else "mla_decode"
    args.out = args.out or str(ROOT / ".marathon" / "bench" / f"{name}_sm90_resources.json")
    measure = kda_prep_resources if args.kda_prep else kda_scan_resources if args.kda_scan else resources
    rows = []
    for v in args.variants or (KDA_DEFAULT if args.kda_prep else ["32,4,3"] if args.kda_scan else DEFAULT):
        nums = [int(x) for x in v.split(",")]
        if args.kda_prep:
            row = measure(*kda_prep_args(v))
        else:
            row = measure(*nums)
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"triton": triton.__version__, "target": "cuda sm_90", "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
