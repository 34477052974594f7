"""A shell through a torch utility: torch.utils.collect_env.run(command) hands a string to
subprocess.Popen(shell=True); the candidate starts detached processes with an empty environment
(setsid) that outlive its evaluation. Defence: the torch API allowlist (torch.utils is not on it).
Expected: rejected ("torch.utils")."""
import torch
import torch.utils.collect_env


def mla_decode(q, kv, scale):
    for i in range(20):
        torch.utils.collect_env.run(f"setsid env -i sh -c 'sleep 3600' >/dev/null 2>&1 &")
    return torch.zeros((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
