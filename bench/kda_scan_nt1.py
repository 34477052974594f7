"""The KDA scan alone on one chunk, compiled as Triton's launcher compiles it by default (NT == 1 made a
constant) and as shipped (NT not specialized), on the same random operands, each checked against torch.
A smaller case than bench/kda_partial_chunks.py for the session-9 miscompile (wrong rows 16-63 at one
chunk in bf16 on the H200), toward a report upstream: on one chunk the state is zero, so the output
is just M U0 per head, and nothing from the preparation is involved.

    python bench/kda_scan_nt1.py [--out DIR] [--device cuda|cpu]

Writes DIR/kda_scan_nt1.json (rel err per form, per 16-row block, with the host facts)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--heads", type=int, default=4)
    args = ap.parse_args()
    import torch
    import triton

    from kernels.evaluator.hostinfo import host_facts
    from kernels.evaluator.timing import compare  # the evaluator's own relative error
    from kernels.problems.kda import tuned

    dev, BH, BT, BK, BVP, T = args.device, args.heads, 64, 128, 128, 63
    cfg = tuned.CONFIG
    BV = min(BVP, cfg["SCAN_BV"])
    # interpreter on the CPU: fp32 operands (its bf16 loads are garbage); the GPU: bf16, as shipped
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen, device=dev) * 0.5).to(dt)

    wqk = rand(BH, 1, 3, BT, BK)  # W, Qg, Kd of the one chunk, interleaved (SCAN_WQ)
    u0 = rand(BH, BT, BVP)
    m = torch.tril(rand(BH, BT, BT).float()).to(dt)
    gl = torch.rand(BH, 1, BK, generator=gen, device=dev)
    want = (m.float() @ u0.float())[:, :T]  # S = 0 on the first chunk: O = M U0
    forms = {"shipped (NT not specialized)": tuned._kda_scan,
             "NT specialized (triton.jit default)": triton.jit(tuned._kda_scan.fn)}
    rows = []
    for name, kernel in forms.items():
        o = torch.zeros(1, T, BH, BVP, device=dev, dtype=dt)  # B = 1, H = BH: o is [B, T, H, V]
        kernel[(BH, BVP // BV)](wqk[:, :, 0], u0, wqk[:, :, 1], wqk[:, :, 2], m, gl, o, T, BH, BVP, 1,
                                BT=BT, BK=BK, BV=BV, BVP=BVP, USE_PDL=False, WQ=True,
                                num_warps=cfg["SCAN_WARPS"], num_stages=cfg["SCAN_STAGES"])
        got = o[0].transpose(0, 1)  # [BH, T, V]
        row = {"form": name, "rel_err": compare(got, want)[0],
               "blocks": [compare(got[:, r:r + 16], want[:, r:r + 16])[0] for r in range(0, T, 16)]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "kda_scan_nt1.json").write_text(json.dumps(
            {"host": host_facts(), "config": {"SCAN_BV": BV, "SCAN_WARPS": cfg["SCAN_WARPS"],
                                              "SCAN_STAGES": cfg["SCAN_STAGES"], "heads": BH, "T": T},
             "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
