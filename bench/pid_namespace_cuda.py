"""On a GPU: does CUDA (torch, then a Triton kernel) work inside the sandbox's PID namespace? Where the
fence self-test switches the PID namespace off on a host, this says at which step it breaks.

    python bench/pid_namespace_cuda.py [--out FILE]   (figures; a record: bench/record_verdict.py --figures)

Each step runs a small child program (its process id, /dev/shm, a CUDA tensor, a Triton kernel) and
keeps its exit code and the last lines of its output:
1. `bare`: the child as it is (the control: CUDA works on this host).
2. `pid and mount namespace`: through kernels.evaluator.contained, as the judge starts a sandbox
   (PID 1 of a PID namespace, a mount namespace with a /dev/shm and a /proc of its own), no other fence.
3. `pid namespace only`: a PID namespace without the mount namespace (the host's /dev/shm and /proc,
   where getpid() names the host's init).
4. `judge, pid namespace alone` and `judge, every fence`: the fence self-test's own evaluation (its
   probe problem and kernel) with that set of fences, the self-test skipped; its verdict or, with
   none, the judge's last lines."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kernels.evaluator.judge import fence_probe_request
from kernels.settings import FENCE_SWITCHES

CHILD = """import os
print("pid", os.getpid(), "dev/shm entries", len(os.listdir("/dev/shm")),
      "/proc pids", sum(name.isdigit() for name in os.listdir("/proc")), flush=True)
import torch
x = torch.ones(1000, device="cuda")
print("torch ok", float(x.sum()), flush=True)
import triton
import triton.language as tl

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

double[(1,)](x, 1000, BLOCK=1024)
torch.cuda.synchronize()
print("triton ok", float(x.sum()), flush=True)
"""

# the PID namespace alone (no mount namespace), as enter_pid_namespace does it without CLONE_NEWNS
PID_ONLY = """import os, runpy, sys
from kernels.evaluator import isolation
print("unshare", isolation.libc().unshare(isolation.CLONE_NEWPID), flush=True)
pid = os.fork()
if pid == 0:
    runpy.run_module("pidns_child", run_name="__main__")
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run(cmd: list[str], env: dict, timeout: float) -> dict:
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout)
        return {"exit": done.returncode, "stdout": done.stdout[-1500:], "stderr": done.stderr[-2500:]}
    except subprocess.TimeoutExpired:
        return {"exit": None, "timed_out_s": timeout}


def _judge(folder: Path, env: dict, off: list[str]) -> dict:
    req_path, out_path = folder / "request.json", folder / "verdict.json"
    req_path.write_text(fence_probe_request("cuda").model_dump_json())
    out_path.unlink(missing_ok=True)
    env = {**env, "MARATHON_SANDBOX_SELF_TEST": "0", **{FENCE_SWITCHES[name]: "0" for name in off}}
    got = _run([sys.executable, "-m", "kernels.evaluator.judge", str(req_path), str(out_path)], env, 300)
    if out_path.exists():
        verdict = json.loads(out_path.read_text())
        got["verdict"] = {k: verdict.get(k) for k in ("status", "sandbox")}
        got["verdict"]["reason"] = str(verdict.get("reason", ""))[-2500:]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="pid_namespace_cuda.json")
    args = ap.parse_args()
    steps = {}
    with tempfile.TemporaryDirectory(prefix="marathon-pidns-") as tmp:
        folder = Path(tmp)
        (folder / "pidns_child.py").write_text(CHILD)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))}
        steps["bare"] = _run([sys.executable, str(folder / "pidns_child.py")], env, 180)
        steps["pid and mount namespace"] = _run(
            [sys.executable, "-m", "kernels.evaluator.contained", "pidns_child"], env, 180)
        steps["pid namespace only"] = _run([sys.executable, "-c", PID_ONLY], env, 180)
        steps["judge, pid namespace alone"] = _judge(folder, env, [n for n in FENCE_SWITCHES if n != "pid_namespace"])
        steps["judge, every fence"] = _judge(folder, env, [])
    Path(args.out).write_text(json.dumps({"steps": steps}, indent=1))
    for name, got in steps.items():
        status = got.get("verdict", {}).get("status") if "verdict" in got else f"exit {got.get('exit')}"
        print(f"{name}: {status}")


if __name__ == "__main__":
    main()
