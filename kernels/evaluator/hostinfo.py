"""Facts about the host a measurement ran on, for verdicts and benchmark records."""
from __future__ import annotations

import platform
import subprocess
import time


def nvidia_driver() -> str | None:
    """The NVIDIA driver version from nvidia-smi, or None where there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else None


def host_facts() -> dict:
    """GPU, driver, torch, triton and Python versions, host name and the UTC time."""
    import torch
    import triton
    return {"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "driver": nvidia_driver(),
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "host": platform.node(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
