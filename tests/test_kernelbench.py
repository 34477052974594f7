"""KernelBench-format files as problems (kernels/problems/kernelbench.py): the CLI and the judge on the CPU, tiny
shapes. The problems here are written for these tests; docs/examples/ holds the README's."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.evaluator.evaluate import EvalRequest, evaluate
from kernels.problems.spec import ProblemFileError, ShapeError, get_problem, resolve_problem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
pytestmark = pytest.mark.timeout(240)

# a problem the examples do not hold: softplus of a shifted input, with a learned shift
SOFTPLUS = '''"""Softplus of a shifted input: y = log(1 + exp(x + shift))."""
import torch
from torch import nn

rows = 1000
cols = 1000


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return torch.nn.functional.softplus(x + self.shift)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]
'''

CANDIDATE = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _softplus(x_ptr, s_ptr, y_ptr, n, cols, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    z = tl.load(x_ptr + o, mask=m, other=0.0) + tl.load(s_ptr + o % cols, mask=m, other=0.0)
    tl.store(y_ptr + o, EXPR, mask=m)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.shift = nn.Parameter(torch.empty(cols))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softplus[(triton.cdiv(x.numel(), 128),)](x, self.shift, y, x.numel(), x.shape[1], BLOCK=128)
        return y
'''
HONEST = CANDIDATE.replace("EXPR", "tl.maximum(z, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(z)))")
WRONG = CANDIDATE.replace("EXPR", "tl.maximum(z, 0.0)")  # relu: close, not softplus
TORCH_COMPUTES = HONEST.replace("        x = x.contiguous()\n", "        x = x.contiguous() * 1.0\n")


def _eval(tmp_path, problem: str, candidate: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "softplus.py").write_text(SOFTPLUS)
    (tmp_path / "cand.py").write_text(candidate)
    return subprocess.run([sys.executable, "marathon.py", "eval", "--problem", problem, "--kernel",
                           str(tmp_path / "cand.py"), "--device", "cpu", "--json", "--no-baselines", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=200)


@pytest.mark.parametrize("candidate, status", [(HONEST, "ok"), (WRONG, "incorrect"), (TORCH_COMPUTES, "rejected")])
def test_eval_a_file_problem_with_shape_overrides(tmp_path, candidate, status):
    out = _eval(tmp_path, str(tmp_path / "softplus.py"), candidate, "--shape", "rows=3,cols=45")
    assert out.returncode == (0 if status == "ok" else 1), out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["status"] == status, verdict["reason"]
    assert verdict["problem"] == "softplus"
    assert verdict["shapes"][0]["shape"] == {"rows": 3, "cols": 45}  # the override, not the file's 1000x1000
    if status == "rejected":
        assert "torch computed part of the answer" in verdict["reason"]


def test_a_linear_layer_with_an_epilogue_gets_models_parameters():
    """linear_gelu: nn.Linear's weight and bias, loaded from Model's state_dict; the candidate reads
    them and calls nothing of torch's; the same candidate in fp16 passes too."""
    for dtype in ("float32", "float16"):
        req = EvalRequest(problem="linear_gelu", problem_source=(EXAMPLES / "linear_gelu.py").read_text(),
                          source=(EXAMPLES / "linear_gelu_kernel.py").read_text(), device="cpu", dtype=dtype,
                          shapes=[{"batch_size": 4, "in_features": 21, "out_features": 10}], baselines=False,
                          probe_shapes=0)
        verdict = evaluate(req)
        assert verdict.status == "ok", verdict.reason
        assert verdict.dtype == dtype and verdict.kernels_launched == ["candidate._linear_gelu"]


def test_the_linear_layer_called_in_forward_is_rejected():
    calls_linear = (EXAMPLES / "linear_gelu_kernel.py").read_text().replace(
        "        x = x.contiguous()\n", "        x = x.contiguous()\n        self.linear(x)\n")
    req = EvalRequest(problem="linear_gelu", problem_source=(EXAMPLES / "linear_gelu.py").read_text(),
                      source=calls_linear, device="cpu", mode="test", probe_shapes=0,
                      shapes=[{"batch_size": 2, "in_features": 8, "out_features": 5}])
    verdict = evaluate(req)
    assert verdict.status == "rejected" and "addmm" in verdict.reason


def test_the_fence_self_test_kernel_passes():
    """The evaluator's own probe (kernels/evaluator/fence_probe/) passes: the fence self-test on a GPU depends on it."""
    from kernels.evaluator.judge import fence_probe_request
    verdict = evaluate(fence_probe_request("cpu"))
    assert verdict.status == "ok", verdict.reason


@pytest.mark.parametrize("text, says", [
    ("import torch\n\ndef get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n", "no class Model"),
    ("class Model:\n    pass\n\ndef get_init_inputs():\n    return []\n", "no get_inputs()"),
    ("class Model(:\n", "syntax error at line 1"),
    # FLOPS is evaluated outside the problem's fences (the roofline): arithmetic over the dimensions only
    (SOFTPLUS + 'FLOPS = "().__class__.__base__.__subclasses__()"\n', "FLOPS may use the dimensions"),
    (SOFTPLUS + 'FLOPS = "rows * __import__(\'os\').getpid()"\n', "FLOPS may use the dimensions"),
])
def test_bad_problem_files_are_named_and_refused(tmp_path, text, says):
    path = tmp_path / "mine.py"
    path.write_text(text)
    with pytest.raises(ProblemFileError, match=f"problem mine: .*{says}"):
        resolve_problem(str(path))
    out = _eval(tmp_path, str(path), HONEST)
    assert out.returncode == 2 and out.stdout == ""
    assert says in out.stderr and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_unknown_shape_names_and_cpu_without_shapes_are_clear_errors(tmp_path):
    out = _eval(tmp_path, str(tmp_path / "softplus.py"), HONEST, "--shape", "rows=3,colz=4")
    assert out.returncode == 2 and "softplus has no dimension colz" in out.stderr
    out = _eval(tmp_path, str(tmp_path / "softplus.py"), HONEST)  # 1000x1000 in the interpreter: asks for --shape
    assert out.returncode == 2 and "--shape" in out.stderr and "Traceback" not in out.stderr


def test_spec_from_the_file():
    spec = get_problem("softplus", SOFTPLUS)
    assert spec.dims == ("rows", "cols") and spec.shapes("bench") == [{"rows": 1000, "cols": 1000}]
    assert spec.entry_point == "ModelNew" and spec.dtypes == {"cpu": "float32", "cuda": "float32"}
    assert "Softplus of a shifted input" in spec.statement and "def get_inputs" in spec.statement
    with pytest.raises(ShapeError, match="--shape"):
        spec.shapes("smoke")
    declared = SOFTPLUS + '\nTOLERANCE = {"rel": 1e-5, "abs_frac": 1e-4}\nSMOKE_SHAPES = [{"cols": 7}]\n'
    spec = get_problem("softplus", declared)
    assert spec.tolerances["float32"].rel == 1e-5 and spec.shapes("smoke") == [{"rows": 1000, "cols": 7}]
    assert resolve_problem("kernels/problems/kda/") == ("kda", None) and resolve_problem("mla_decode") == ("mla_decode", None)


def test_marathon_run_on_a_file_problem_finishes_ok(tmp_path):
    """The acceptance command: a run on a file problem (the tuner policy: one evaluation, then nothing
    to tune) reports an ok best kernel; the problem's source travels in the run input."""
    out = subprocess.run([sys.executable, "marathon.py", "run", "--problem", str(EXAMPLES / "rms_norm.py"),
                          "--kernel", str(EXAMPLES / "rms_norm_kernel.py"), "--device", "cpu",
                          "--shape", "batch_size=3,dim=40", "--max-tool-calls", "6", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["problem"] == "rms_norm" and report["best"]["verdict"]["status"] == "ok"
    assert report["best"]["verdict"]["shapes"][0]["shape"] == {"batch_size": 3, "dim": 40}


def test_prepare_refuses_a_bad_problem_source(tmp_path):
    """The run's prepare step (a ValueError there fails the workflow at once, not retried) on a file
    problem: a broken source, and a CPU run of a file without small shapes, each named."""
    from activities import tools
    from activities.artifacts import ArtifactStore
    from workflows.models import EvalSettings, PrepareInput
    store = ArtifactStore(tmp_path)
    with pytest.raises(ProblemFileError, match="problem mine: syntax error"):
        tools.prepare(PrepareInput(problem="mine", problem_source="class Model(:\n", source=HONEST), store)
    with pytest.raises(ShapeError, match="problem softplus: .*--shape"):
        tools.prepare(PrepareInput(problem="softplus", problem_source=SOFTPLUS, source=HONEST,
                                   eval=EvalSettings(device="cpu")), store)
    setup = tools.prepare(PrepareInput(problem="softplus", problem_source=SOFTPLUS, source=HONEST,
                                       eval=EvalSettings(device="cpu", shape_list=[{"rows": 2}])), store)
    assert setup.entry_point == "ModelNew" and setup.shapes == [{"rows": 2, "cols": 1000}]
    assert "Softplus of a shifted input" in setup.statement


def test_roofline_bytes_and_declared_probes():
    """The memory floor counts inputs, parameters and the output once each; FLOPS and PROBE_RANGES
    declared in the file reach the spec."""
    spec = get_problem("softplus", SOFTPLUS)
    traffic = spec.traffic({"rows": 2, "cols": 3}, 4)
    assert traffic.min_bytes == 4 * (2 * 3 + 3 + 2 * 3) and traffic.tensor_flops == 0
    declared = SOFTPLUS + '\nFLOPS = "2 * rows * cols"\nPROBE_RANGES = {"cpu": {"rows": (1, 9)}}\n'
    spec = get_problem("softplus", declared)
    assert spec.traffic({"rows": 2, "cols": 3}, 2).tensor_flops == 12
    assert spec.probe_ranges == {"cpu": {"rows": (1, 9)}}
