"""A hostile problem file (KernelBench format), as anyone who can start a workflow may send: its
module top level, before any candidate is judged, hunts the worker's key in every /proc/*/environ and
cmdline (listed, guessed and named), reads a canary file under /tmp and the project, writes outside its
scratch folder and into the project, connects to a listener on the host (TCP, an abstract unix
socket, a unix socket of a path, a datagram sent to a path), starts a shell (subprocess, posix_spawn, detached), Python and a fork, and leaves a program it
may start (the C compiler) blocked in a session of its own; get_inputs() then raises all it found,
with a value of the worker's environment written into this file. Defence: problem code runs only in
a fenced process of its own (kernels/evaluator/problem_process.py: the candidate's fences, a PID
namespace), never in the judge; the worker scrubs its environment's values from what leaves it.
Expected (tests/kernels/evaluator/test_confinement.py): crashed, naming the problem file; every attempt denied but the
compiler, which is gone with the evaluation; the canary in no verdict, log or file."""
import torch
from torch import nn

from escape_attempts import escape_everything  # the test inlines that module: tests/ is unreadable in the fences

n = 8
FOUND = escape_everything(canary_file="@CANARY_FILE@", leak_path="@LEAK_PATH@", project_file="@PROJECT_FILE@",
                          port=int("@PORT@"), abstract="@ABSTRACT@", marker="@MARKER@", pids=[@PIDS@],
                          unix_path="@UNIX_PATH@", dgram_path="@DGRAM_PATH@")


class Model(nn.Module):
    def forward(self, x):
        return x + 1.0


def get_inputs():
    raise RuntimeError(f"hostile problem report: {FOUND}; and a value it was given: @ECHO@")


def get_init_inputs():
    return []
