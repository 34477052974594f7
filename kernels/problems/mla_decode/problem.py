"""MLA decode: absorbed multi-head latent attention for one new token per sequence (DeepSeek-V3)."""
from kernels.problems.spec import ProblemSpec, ShapeError, Tolerance, Traffic

D_LATENT, D_ROPE = 512, 64
D_QK = D_LATENT + D_ROPE  # 576
SCALE = 192 ** -0.5  # pinned: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) of DeepSeek-V3


def _check(shape: dict[str, int]) -> None:
    # The kernel must handle any positive B, H, S; the caps only keep one evaluation's memory sane.
    if shape["B"] * shape["S"] * D_QK > 2**33:
        raise ShapeError("B*S*576 above 2^33 elements: too large to evaluate")
    if shape["B"] * shape["H"] * shape["S"] > 2**32:
        raise ShapeError("B*H*S above 2^32: the fp32 reference's score matrix would not fit")


def _traffic(shape: dict[str, int], elem: int) -> Traffic:
    b, h, s = shape["B"], shape["H"], shape["S"]
    min_bytes = elem * (b * s * D_QK + b * h * D_QK + b * h * D_LATENT)  # kv once, q once, o once
    flops = 2 * b * h * s * (D_QK + D_LATENT)  # q.kv^T and p.kv[..., :512]
    return Traffic(min_bytes, flops)


PROBLEM = ProblemSpec(
    name="mla_decode",
    entry_point="mla_decode",
    dims=("B", "H", "S"),
    shape_sets={
        # seconds in the Triton interpreter: tiny heads count, tails on every block size
        "smoke": [{"B": 1, "H": 4, "S": 100}, {"B": 2, "H": 3, "S": 37}],
        "bench": [{"B": 1, "H": 64, "S": 8192}],
        "sweep": [
            {"B": 1, "H": 16, "S": 1024},
            {"B": 3, "H": 16, "S": 1000},
            {"B": 1, "H": 128, "S": 8192},
            {"B": 4, "H": 64, "S": 4097},
            {"B": 32, "H": 128, "S": 8192},
            {"B": 128, "H": 16, "S": 1024},
            {"B": 1, "H": 64, "S": 32768},
            {"B": 2, "H": 128, "S": 32768},
        ],
    },
    defaults={"B": 1, "H": 64},
    check_shape=_check,
    traffic=_traffic,
    tolerances={
        # Honest kernels (fp32 accumulation, P rounded for the second product, output rounding) land
        # at rel ~2e-3 in bf16 and ~2.3e-4 in fp16 (max-abs ~4e-3 / ~4e-4 of max|ref|); accumulating
        # the output across KV tiles in the input precision gives 6e-3..2e-2 (bf16) and 6e-4..2e-3
        # (fp16), growing with S. Limits at ~3-4x the honest error, which the precision-downcast
        # hostile candidate (tests/hostile/) fails.
        "bfloat16": Tolerance(rel=6e-3, abs_frac=2e-2),
        "float16": Tolerance(rel=1e-3, abs_frac=5e-3),
        "float32": Tolerance(rel=1e-3, abs_frac=1e-2),
    },
    dtypes={"cpu": "float16", "cuda": "bfloat16"},
    shipped_kernels=("starter", "tuned"),
    batch_dim="B",
    # probe shapes: ranges per device keep the interpreter quick on the CPU; S drawn log-uniformly
    probe_ranges={"cpu": {"B": (1, 2), "H": (1, 5), "S": (1, 160)},
                  "cuda": {"B": (1, 4), "H": (1, 128), "S": (1, 6000)}},
    log_drawn_dims=("S",),
)
