"""What the GPU itself reaches on the operations our roofline floors assume, measured in one process.

    python bench/device_peaks.py [--out FILE]     # default .marathon/bench/device_peaks_<gpu>.json (a raw file; bench/results keeps only ResultRecords)

1. A dense bf16 matmul, 8192 x 8192 x 8192 (torch.matmul, so cuBLAS): TFLOP/s. kernels/evaluator/roofline.py
   takes the H200's compute floor from this figure.
2. MLA decode's two products at B=32, H=128, S=8192 with the latent cache as both K and V, each as one
   batched cuBLAS matmul and without the softmax between them: scores = q @ kv^T (576 deep) and
   out = p @ c (512 wide). A yardstick for the HBM share that shape can reach: a decode kernel does
   these products and more, so taking much less time than the library needs for them alone would
   ask its products to run far faster than cuBLAS's do at these shapes (not a proof: a fused kernel
   may tile them better; the 8192^3 rate of 1. is the harder ceiling).
3. A device-to-device copy of 2 GiB: bytes read plus bytes written per second.

Each figure is the median of CUDA-event timings after a warm-up (no L2 flush: each operand is far
larger than the L2, or the operation is compute-bound)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from kernels.evaluator.hostinfo import host_facts

ROOT = Path(__file__).resolve().parent.parent


def median_ms(fn, reps: int = 20) -> float:
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("device_peaks: no CUDA device", file=sys.stderr)
        return 2
    dev, bf16 = "cuda", torch.bfloat16
    result = {"host": host_facts()}

    n = 8192
    a, b = torch.randn(n, n, device=dev, dtype=bf16), torch.randn(n, n, device=dev, dtype=bf16)
    ms = median_ms(lambda: a @ b)
    result["gemm_8192_bf16"] = {"ms": round(ms, 4), "tflops": round(2 * n**3 / (ms * 1e-3) / 1e12, 1)}
    del a, b

    B, H, S, d_lat, d_rope = 32, 128, 8192, 512, 64
    q = torch.randn(B, H, d_lat + d_rope, device=dev, dtype=bf16)
    kv = torch.randn(B, S, d_lat + d_rope, device=dev, dtype=bf16)
    p = torch.randn(B, H, S, device=dev, dtype=bf16)
    kv_t, c = kv.transpose(1, 2), kv[:, :, :d_lat]
    qk_ms = median_ms(lambda: torch.bmm(q, kv_t))
    pv_ms = median_ms(lambda: torch.bmm(p, c))
    both_ms = median_ms(lambda: (torch.bmm(q, kv_t), torch.bmm(p, c)))
    flops = 2 * B * H * S * (d_lat + d_rope) + 2 * B * H * S * d_lat
    cache_bytes = kv.numel() * kv.element_size()
    result["mla_b32_products"] = {
        "shape": {"B": B, "H": H, "S": S}, "qk_us": round(qk_ms * 1e3, 2), "pv_us": round(pv_ms * 1e3, 2),
        "both_us": round(both_ms * 1e3, 2), "gflop": round(flops / 1e9, 2),
        "tflops_both": round(flops / (both_ms * 1e-3) / 1e12, 1), "cache_mb": round(cache_bytes / 1e6, 1),
        # the HBM share a kernel would show if it took exactly as long as the library's products alone
        "cache_gb_per_s_at_both": round(cache_bytes / (both_ms * 1e-3) / 1e9, 1)}
    del q, kv, p, kv_t, c

    src = torch.empty(2 * 2**30, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), reps=10)
    result["copy_2gib"] = {"ms": round(ms, 4), "tb_per_s_read_plus_write": round(2 * src.numel() / (ms * 1e-3) / 1e12, 3)}

    out = Path(args.out) if args.out else ROOT / ".marathon" / "bench" / f"device_peaks_{result['host']['gpu'].split()[-1]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
