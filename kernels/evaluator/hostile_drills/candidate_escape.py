"""A hostile candidate past the static policy (run with MARATHON_UNSAFE_SKIP_POLICY=1): at its first
call it tries every escape of escape_attempts.py (the canary file under /tmp, other processes' /proc,
writes outside its scratch, the network (TCP, abstract and path unix sockets), a shell through subprocess, posix_spawn and a detached
session, torch.utils.collect_env's shell, Python, fork, and a lingering compiler) and raises what it
got. Defence: Landlock's read and program allowlists, seccomp (no fork; on the CPU no vfork, no exec at
all), its PID namespace, the network namespace. Expected (tests/kernels/evaluator/test_confinement.py): crashed, every
attempt denied (on CUDA the compiler starts and is gone with the evaluation), nothing left running."""
import torch

from escape_attempts import REPORT, attempt, escape_everything  # the test inlines that module


def mla_decode(q, kv, scale):
    def collect_env_shell():
        from torch.utils import collect_env
        return collect_env.run("sleep 600 # @MARKER@")

    attempt("collect_env shell", collect_env_shell)
    found = escape_everything(canary_file="@CANARY_FILE@", leak_path="@LEAK_PATH@", project_file="@PROJECT_FILE@",
                              port=int("@PORT@"), abstract="@ABSTRACT@", marker="@MARKER@", pids=[@PIDS@],
                              unix_path="@UNIX_PATH@", dgram_path="@DGRAM_PATH@")
    raise RuntimeError(f"hostile candidate report: {found}")
