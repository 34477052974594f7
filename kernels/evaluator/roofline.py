"""Device profiles and the roofline floor: the fastest any kernel could be, from bytes and FLOPs."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    hbm_bytes_per_s: float  # achievable device-memory bandwidth (read + write)
    bf16_flops_per_s: float  # achievable dense bf16 tensor-core rate
    fp32_flops_per_s: float  # plain fp32 (non tensor-core) rate
    l2_bytes: int
    source: str


# H200: on an H200, an 8.6 GB device-to-device copy moved 4.3 TB/s and an 8192^3 bf16 matmul ran at
# ~790 TFLOP/s; bench/device_peaks.py measured 788.6 TFLOP/s and 4.21 TB/s for a 2 GiB copy
# (bench/results/h200/device_peaks.json). H100 SXM: datasheet 3.35 TB/s and 989 TFLOP/s scaled by the
# same achieved/datasheet ratios (0.90, 0.80), so both floors mean the same thing.
PROFILES: dict[str, DeviceProfile] = {
    "H200": DeviceProfile("H200", 4.3e12, 790e12, 60e12, 60 * 2**20,
                          "measured on an H200: copy 4.3 TB/s, bf16 GEMM 790 TFLOP/s (bench/device_peaks.py)"),
    "H100": DeviceProfile("H100", 3.0e12, 790e12, 60e12, 50 * 2**20,
                          "H100 SXM datasheet scaled by the H200's achieved/datasheet ratios"),
}


def profile_for_gpu(gpu_name: str | None) -> DeviceProfile | None:
    """The profile whose name appears in the GPU's name ('NVIDIA H200' -> H200), else None."""
    if not gpu_name:
        return None
    upper = gpu_name.upper()
    for key, profile in PROFILES.items():
        if key in upper:
            return profile
    return None


def floor_seconds(min_bytes: float, tensor_flops: float, profile: DeviceProfile, scalar_flops: float = 0.0) -> float:
    """Max of the memory time and the compute time: no correct kernel runs faster than this."""
    return max(min_bytes / profile.hbm_bytes_per_s,
               tensor_flops / profile.bf16_flops_per_s + scalar_flops / profile.fp32_flops_per_s)
