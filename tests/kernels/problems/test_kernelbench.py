"""KernelBench-format files as problems (kernels/problems/kernelbench.py): the CLI and the judge on the CPU, tiny
shapes. The problems here are written for these tests; docs/examples/ holds the README's."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernels.evaluator.evaluate import EvalRequest, evaluate
from kernels.evaluator import seal
from kernels.problems import kernelbench_runtime
from kernels.problems.spec import ProblemFileError, get_problem, resolve_problem

ROOT = Path(__file__).resolve().parents[3]
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


# every pattern the loader must follow: a size written as an expression, a chained assignment, derived
# constants and tuples, integers that are no sizes (zero, negative), a float
PATTERNS = '''"""Rows of a batch of matrices projected, a bias added, clamped from below and scaled."""
import torch
from torch import nn

batch = 2 * 4  # a size written as an expression
rows = cols = 24  # sizes in a chained assignment
hidden = cols // 2  # derived: follows cols
input_shape = (rows, cols)  # a derived tuple
bias_shape = (1, hidden)  # a derived tuple of a derived constant
clamp_min = -2  # an integer that is no size (negative)
padding = 0  # an integer that is no size (zero)
scale = 0.5


class Model(nn.Module):
    def __init__(self, cols, hidden, bias_shape, clamp_min, padding):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cols, hidden) / cols ** 0.5)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.clamp_min, self.padding = clamp_min, padding

    def forward(self, x):
        y = torch.matmul(x, self.weight) + self.bias
        if self.padding:
            y = torch.nn.functional.pad(y, (self.padding, self.padding))
        return torch.clamp(y, min=float(self.clamp_min)) * scale


def get_inputs():
    return [torch.randn(batch, *input_shape)]


def get_init_inputs():
    return [cols, hidden, bias_shape, clamp_min, padding]
'''
PATTERNS_KERNEL = '''"""A Triton candidate for the patterns problem: a tiled GEMM with the bias, the clamp and the scale in its epilogue."""
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _project(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, lo, scale,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, w, acc)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    y = tl.maximum(acc, lo) * scale
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, cols, hidden, bias_shape, clamp_min, padding):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cols, hidden))
        self.bias = nn.Parameter(torch.empty(bias_shape))
        self.clamp_min = clamp_min

    def forward(self, x):
        x = x.contiguous()
        K, N = self.weight.shape
        M = x.numel() // K
        y = torch.empty(x.shape[:-1] + (N,), device=x.device, dtype=x.dtype)
        _project[(triton.cdiv(M, 16), triton.cdiv(N, 16))](x, self.weight.contiguous(), self.bias.contiguous(), y,
                                                             M, N, K, float(self.clamp_min), 0.5, BM=16, BN=16, BK=16)
        return y
'''

# sizes given as a literal tuple, overridden element by element (`input_shape[0]`)
TUPLE_SIZES = '''"""A scaled ReLU over rows whose trailing shape is given as a tuple."""
import torch
from torch import nn

batch_size = 64
input_shape = (4096,)


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, *input_shape)]


def get_init_inputs():
    return []
'''

# a reference with a bug of its own, on three rows (line 11)
BROKEN = '''"""A reference with a bug of its own: it fails on three rows."""
import torch
from torch import nn

rows = 8
cols = 16


def check(x):
    if x.shape[0] == 3:
        raise ValueError("three rows: this reference cannot take them, " + "and it says so at length " * 6)
    return x


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(check(x))


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

RELU_KERNEL = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _relu(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y_ptr + o, tl.maximum(tl.load(x_ptr + o, mask=m, other=0.0), 0.0) * scale, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), SCALE, BLOCK=1024)
        return y
'''


def _marathon(*argv: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "marathon.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _write(tmp_path, **files: str) -> dict[str, str]:
    paths = {}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
        paths[name] = str(tmp_path / f"{name}.py")
    return paths


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


def test_a_problem_importing_a_module_torch_did_not_load_judges_the_candidate(tmp_path):
    """The file's own imports load in the candidate's process ahead of the seal: were they first imported
    by the file's code after it, every candidate would be sealed for them."""
    unloaded = [m for m in ("wave", "colorsys", "netrc", "sched") if importlib.util.find_spec(m)]
    probe = subprocess.run([sys.executable, "-c", "import sys, torch, triton, triton.language; print(' '.join(sys.modules))"],
                           capture_output=True, text=True, timeout=120)
    unloaded = [m for m in unloaded if m not in probe.stdout.split()]
    assert unloaded, "no standard module left that torch and Triton do not load"
    lines = "".join(f"import {m}\n" for m in unloaded[:1]) + "".join(f"from {m} import *\n" for m in unloaded[1:])
    problem = SOFTPLUS.replace("import torch\n", "import torch\n" + lines, 1)
    files = _write(tmp_path, importing=problem)
    out = _eval(tmp_path, files["importing"], HONEST, "--shape", "rows=3,cols=45")
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "ok", verdict["reason"]


def test_imported_modules_names_every_absolute_import():
    source = "import a.b, c\nfrom d import e\nfrom x import *\nfrom . import f\ndef g():\n    import h\n"
    assert kernelbench_runtime.imported_modules(source) == ["a.b", "c", "d", "d.e", "x", "h"]
    many = "".join(f"import m{i}\n" for i in range(200))
    assert len(kernelbench_runtime.imported_modules(many)) == kernelbench_runtime.MAX_PRELOADED


def test_only_installed_modules_are_preloaded(tmp_path, monkeypatch):
    """A module beside the problem or in the working folder is never imported ahead of the seal."""
    (tmp_path / "marathon_planted.py").write_text("import sys\nsys.marathon_planted_ran = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    roots = tuple(p for ps in seal.code_roots().values() for p in ps)
    kernelbench_runtime.preload_imports("import marathon_planted\nimport colorsys\n", roots)
    assert "marathon_planted" not in sys.modules and not hasattr(sys, "marathon_planted_ran")
    assert "colorsys" in sys.modules


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


def test_unknown_shape_names_are_clear_errors(tmp_path):
    out = _eval(tmp_path, str(tmp_path / "softplus.py"), HONEST, "--shape", "rows=3,colz=4")
    assert out.returncode == 2 and "softplus has no overridable constant colz; it has: rows, cols" in out.stderr


def test_on_a_cpu_without_a_shape_the_problem_chooses_small_sizes(tmp_path):
    """No --shape and no SMOKE_SHAPES: the file's own 1000x1000 would take long in the interpreter, so
    its process shrinks the sizes until the reference runs on a few tens of thousands of elements, and
    the verdict says what it chose."""
    out = _eval(tmp_path, str(tmp_path / "softplus.py"), HONEST, "--mode", "test")
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "ok", verdict["reason"]
    shape = verdict["shapes"][0]["shape"]
    assert set(shape) == {"rows", "cols"} and shape["rows"] * shape["cols"] <= 32768
    assert "small sizes chosen for the CPU" in verdict["shapes_note"] and "rows=1000,cols=1000" in verdict["shapes_note"]


def test_spec_from_the_file():
    spec = get_problem("softplus", SOFTPLUS)
    assert spec.dims == ("rows", "cols") and spec.shapes("bench") == [{"rows": 1000, "cols": 1000}]
    assert spec.entry_point == "ModelNew" and spec.dtypes == {"cpu": "float32", "cuda": "float32"}
    assert "Softplus of a shifted input" in spec.statement and "def get_inputs" in spec.statement
    assert spec.shapes("smoke") == [] and spec.chooses_smoke("smoke")  # chosen by running it, in its process
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


def test_prepare_tells_sizes_and_refuses_a_bad_problem_source(tmp_path):
    """The run's prepare step (a ValueError there fails the workflow at once, not retried) on a file
    problem: a broken source is named; a CPU run without shapes gets the small sizes the file's process
    chose, and the statement shows the sizes apart from the other constants."""
    from activities import tools
    from activities.artifacts import ArtifactStore
    from workflows.models import EvalSettings, PrepareInput
    store = ArtifactStore(tmp_path)
    with pytest.raises(ProblemFileError, match="problem mine: syntax error"):
        tools.prepare(PrepareInput(problem="mine", problem_source="class Model(:\n", source=HONEST), store)
    with pytest.raises(ValueError, match=r"problem broken, line 11: ValueError: three rows"):  # at every size
        tools.prepare(PrepareInput(problem="broken", problem_source=BROKEN.replace("x.shape[0] == 3", "x.numel()"),
                                   source=HONEST, eval=EvalSettings(device="cpu")), store)
    setup = tools.prepare(PrepareInput(problem="patterns", problem_source=PATTERNS, source=PATTERNS_KERNEL,
                                       eval=EvalSettings(device="cpu")), store)
    assert setup.shape_set == "smoke" and setup.shapes == [{"batch": 8, "rows": 24, "cols": 24}]
    assert "Sizes (they shape the inputs and Model's parameters" in setup.statement
    assert "Other constants: clamp_min=-2, padding=0, scale=0.5." in setup.statement
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


def test_marathon_problem_tells_sizes_from_other_constants(tmp_path):
    """The file run in its fenced process: sizes are what shape inputs or parameters (an expression, a
    chained assignment), other constants are the rest (zero, negative, a float); the derived constants
    follow the sizes; the smoke set is the file's own where it is small already."""
    files = _write(tmp_path, patterns=PATTERNS)
    out = _marathon("problem", files["patterns"], "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["name"] == "patterns" and report["dimensions"] == {"batch": 8, "rows": 24, "cols": 24}
    assert report["constants"] == {"clamp_min": -2, "padding": 0, "scale": 0.5}
    assert report["shapes"] == {"smoke": [{"batch": 8, "rows": 24, "cols": 24}],
                                "bench": [{"batch": 8, "rows": 24, "cols": 24}]}
    (call,) = report["reference"]
    assert call["status"] == "ok" and call["output_shape"] == [8, 24, 12] and call["seconds"] >= 0
    assert "Other constants: clamp_min=-2, padding=0, scale=0.5." in report["statement"]
    text = _marathon("problem", files["patterns"])
    assert text.returncode == 0 and "dimensions (sizes): batch=8,rows=24,cols=24" in text.stdout
    assert "reference at batch=8,rows=24,cols=24: ok, output (8, 24, 12)" in text.stdout
    assert "statement (first lines):" in text.stdout


def test_derived_constants_follow_an_override_and_only_given_values_are_checked(tmp_path):
    """--shape re-runs the file's top level with the names pinned: hidden = cols // 2 and the tuples built
    from them follow; a constant may be given zero or a negative value, a size below 1 is refused."""
    files = _write(tmp_path, patterns=PATTERNS, patterns_kernel=PATTERNS_KERNEL)
    out = _marathon("problem", files["patterns"], "--shape", "rows=5,cols=10,padding=1", "--json")
    assert out.returncode == 0, out.stderr
    (call,) = json.loads(out.stdout)["reference"]
    assert call["shape"] == {"batch": 8, "rows": 5, "cols": 10, "padding": 1} and call["output_shape"] == [8, 5, 7]
    out = _marathon("problem", files["patterns"], "--shape", "cols=0")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == ("marathon problem: problem patterns: cols=0: a size (it shapes an input or a "
                                  "parameter) must be at least 1")
    out = _marathon("eval", "--problem", files["patterns"], "--kernel", files["patterns_kernel"], "--device", "cpu",
                    "--json", "--no-baselines", "--mode", "test", "--shape", "batch=3,clamp_min=-1,padding=0")
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "ok", verdict["reason"]
    assert verdict["shapes"][0]["shape"] == {"batch": 3, "rows": 24, "cols": 24, "clamp_min": -1}


def test_tuple_sizes_are_overridden_by_element(tmp_path):
    files = _write(tmp_path, tuple_sizes=TUPLE_SIZES)
    out = _marathon("problem", files["tuple_sizes"], "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["dimensions"] == {"batch_size": 64, "input_shape[0]": 4096}
    (small,) = report["shapes"]["smoke"]
    assert small["batch_size"] * small["input_shape[0]"] <= 32768 and small["input_shape[0]"] < 4096
    out = _marathon("problem", files["tuple_sizes"], "--shape", "input_shape[0]=7", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reference"][0]["output_shape"] == [64, 7]


def test_a_reference_that_raises_is_the_problems_error_in_one_line(tmp_path):
    """`marathon problem` and `marathon eval`: exit 2, one line naming the file and its line, no traceback;
    never an infrastructure error, never a verdict on the kernel."""
    files = _write(tmp_path, broken=BROKEN, relu_kernel=RELU_KERNEL.replace("SCALE", "1.0"))
    out = _marathon("problem", files["broken"], "--shape", "rows=3")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"marathon problem: {files['broken']}, line 11: ValueError: three rows: this reference cannot take them, "
        + "and it says so at length " * 5 + "and it says so at length"]
    assert "reference at rows=3,cols=16: ERROR problem broken, line 11: ValueError" in out.stdout
    out = _marathon("eval", "--problem", files["broken"], "--kernel", files["relu_kernel"], "--device", "cpu",
                    "--shape", "rows=3", "--no-baselines")
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.startswith("marathon eval: problem broken, line 11: ValueError: three rows")
    assert len(out.stderr.strip().splitlines()) == 1
    out = _marathon("eval", "--problem", files["broken"], "--kernel", files["relu_kernel"], "--device", "cpu",
                    "--shape", "rows=4", "--no-baselines", "--mode", "test")
    assert out.returncode == 0, out.stderr  # elsewhere the same file is a problem like any other


def test_a_run_on_a_broken_problem_ends_at_once_saying_so(tmp_path):
    """A run whose problem fails in its own code: the first evaluation ends it (not retried as an
    infrastructure fault), the stop reason and the notebook carry the problem's line whole."""
    files = _write(tmp_path, broken=BROKEN, relu_kernel=RELU_KERNEL.replace("SCALE", "1.0"))
    out = _marathon("run", "--problem", files["broken"], "--kernel", files["relu_kernel"], "--device", "cpu",
                    "--shape", "rows=3", "--max-tool-calls", "6", "--json", timeout=400)
    assert out.returncode == 1, out.stderr[-2000:]  # no kernel judged ok
    report = json.loads(out.stdout)
    line = ("problem broken, line 11: ValueError: three rows: this reference cannot take them, "
            + "and it says so at length " * 5 + "and it says so at length")
    assert report["stop_reason"].startswith(f"stopped: the problem is broken: {line}"), report["stop_reason"]
    assert report["tool_calls"] == 1 and report["best"] is None
    notebook = (Path(report["report"]).parent / "notebook.md").read_text()
    assert f"tool call 1 (profile_kernel): the problem is broken: {line}" in notebook, notebook[-2000:]
    assert "infrastructure" not in notebook


def test_outputs_the_judge_asks_for_are_allowed_beside_the_scratch_quota(tmp_path, monkeypatch):
    """The outputs the judge asks the candidate's process to save (a file problem's own sizes: 23_Softmax's
    is 6 GiB) count against no quota, each up to its size; anything else the process writes does."""
    from kernels.evaluator import judge
    monkeypatch.setenv("MARATHON_SANDBOX_DISK", str(2**20))
    proc = judge.CandidateProcess("cpu", tmp_path)
    try:
        proc.memory_cap = 2**40
        out = proc.workdir / "out_0_0.pt"
        out.write_bytes(b"x" * 3 * 2**20)
        with pytest.raises(judge.Outcome, match="wrote 3 MiB under its scratch directory"):
            proc.watch()
        proc.expect(out, 3 * 2**20)
        proc.watch()  # allowed: the judge asked for it
        (proc.workdir / "junk").write_bytes(b"x" * 2 * 2**20)
        with pytest.raises(judge.Outcome, match="wrote 2 MiB under its scratch directory"):
            proc.watch()
        (proc.workdir / "junk").unlink()
        out.write_bytes(b"x" * 6 * 2**20)  # past its size and its file's framing (OUTPUT_FRAMING): the rest counts
        with pytest.raises(judge.Outcome, match="wrote 2 MiB under its scratch directory"):
            proc.watch()
        proc.release(out)
        assert not out.exists() and not proc.outputs
    finally:
        proc.close()


def test_the_reference_file_is_allowed_beside_the_problem_process_quota(tmp_path):
    """A file problem's reference output comes back from its process as a file in that process's scratch
    folder: the judge allows it beside the quota, up to its float32 size, while the process writes it
    (23_Softmax's is 6 GiB, past the 4 GiB quota), and lets it go once loaded."""
    import torch

    from kernels.evaluator import judge, protocol, tensor_file
    seen = {}

    class Proc:
        workdir = tmp_path

        def expect(self, path, nbytes):
            seen["expected"] = (Path(path), nbytes)

        def release(self, path):
            seen["released"] = Path(path)
            Path(path).unlink(missing_ok=True)

    problem = judge.RemoteFileProblem.__new__(judge.RemoteFileProblem)
    problem.proc, problem._count, problem._specs = Proc(), 0, {}
    problem.spec = SimpleNamespace(name="t")
    problem.output_spec = lambda shape, dtype: ((3, 5), dtype)

    def reply(request, kind):
        assert seen["expected"] == (Path(request.output), 3 * 5 * 4)  # allowed before the process writes it
        tensor_file.write(torch.ones(3, 5), request.output)
        return protocol.ReferencedReply(inputs_s=0.0, reference_s=0.0)

    problem._request_reply = reply
    out = problem.reference_for({"n": 3}, 0, torch.bfloat16, "cpu")
    assert torch.equal(out, torch.ones(3, 5)) and seen["released"] == seen["expected"][0]
    assert not seen["released"].exists()


def test_timed_outputs_past_the_keep_share_are_sampled(tmp_path):
    """Where the timed calls' outputs outgrow the share the candidate's process may keep (the file's own
    sizes on a GPU), it keeps a random sample of them; the re-check picks from those and an honest
    candidate stays ok."""
    files = _write(tmp_path, softplus=SOFTPLUS, cand=HONEST)
    out = _marathon("eval", "--problem", files["softplus"], "--kernel", files["cand"], "--device", "cpu", "--json",
                    "--no-baselines", "--shape", "rows=8,cols=64", "--reps", "8",
                    env={"MARATHON_KEEP_OUTPUT_BYTES": str(2 * 8 * 64 * 4)})
    assert out.returncode == 0, out.stderr
    verdict = json.loads(out.stdout)
    assert verdict["status"] == "ok", verdict["reason"]
    assert verdict["shapes"][0]["timing"]["calls"] == 8


# a git checkout of KernelBench, when one is at hand (its files are never part of this tree)
KERNELBENCH = Path(os.environ["KERNELBENCH_ROOT"]) if os.environ.get("KERNELBENCH_ROOT") else None


@pytest.mark.timeout(3600)
@pytest.mark.skipif(KERNELBENCH is None or not KERNELBENCH.exists(), reason="KERNELBENCH_ROOT names no checkout")
def test_a_sample_of_kernelbench_files_runs_untouched(tmp_path):
    """KernelBench's own level1 and level2 files, untouched, 30 drawn with a fixed seed: `marathon problem
    FILE --device cpu --json` finds small sizes and runs the reference there for at least 29 of them
    (bench/kernelbench_sample.py draws other samples)."""
    import random
    names = subprocess.run(["git", "-C", str(KERNELBENCH), "ls-tree", "--name-only", "HEAD", "KernelBench/level1/",
                            "KernelBench/level2/"], capture_output=True, text=True, check=True).stdout.split()
    failed = []
    for name in random.Random(0).sample(sorted(n for n in names if n.endswith(".py")), 30):
        path = tmp_path / Path(name).name
        path.write_text(subprocess.run(["git", "-C", str(KERNELBENCH), "show", f"HEAD:{name}"], capture_output=True,
                                       text=True, check=True).stdout)
        out = _marathon("problem", str(path), "--device", "cpu", "--json", timeout=600)
        ok = out.returncode == 0 and all(c["status"] == "ok" for c in json.loads(out.stdout)["reference"])
        if not ok:
            failed.append(f"{name}: {out.stderr.strip()[-300:]}")
    assert len(failed) <= 1, failed


ONE_SIGN = '''"""A ReLU, then a log of one plus it, over values drawn from [0, 1): the problem's own inputs are never negative."""
import torch
from torch import nn

rows = 8
cols = 96


class Model(nn.Module):
    def forward(self, x):
        return OUTPUT


def get_inputs():
    return [torch.rand(rows, cols)]


def get_init_inputs():
    return []
'''

ONE_SIGN_KERNEL = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + o, mask=o < n, other=0.0)
    tl.store(y_ptr + o, ANSWER, mask=o < n)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _rows[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
'''


@pytest.mark.parametrize("output, answer, status", [
    ("torch.log1p(torch.relu(x))", "tl.log(1.0 + tl.maximum(x, 0.0))", "ok"),
    ("torch.log1p(torch.relu(x))", "tl.log(1.0 + x)", "incorrect"),  # the ReLU skipped: right for x >= 0 only
    ("torch.log(x)", "tl.log(x)", "ok"),  # widened, the log is NaN: not checked there, said so
])
def test_a_kernel_right_only_on_inputs_of_one_sign_is_incorrect(tmp_path, output, answer, status):
    paths = _write(tmp_path, one_sign=ONE_SIGN.replace("OUTPUT", output),
                   cand=ONE_SIGN_KERNEL.replace("ANSWER", answer))
    out = _marathon("eval", "--problem", paths["one_sign"], "--kernel", paths["cand"], "--device", "cpu", "--json",
                    "--no-baselines", "--mode", "test")
    verdict = json.loads(out.stdout)
    assert verdict["status"] == status, verdict["reason"]
    if status == "incorrect":
        assert "widened to both signs" in verdict["reason"] and "x0" in verdict["reason"]
    elif output == "torch.log(x)":
        assert "not checked on widened inputs" in verdict["shapes"][0]["note"]
    else:
        assert not verdict["shapes"][0].get("note")


@pytest.mark.parametrize("line", ["X = {[1]: 2}", "TOLERANCE = {[1]: 2}", 'SMOKE_SHAPES = [{"rows": 2, (1, [2]): 3}]'])
def test_a_dict_python_refuses_is_the_problems_error_in_one_line(tmp_path, line):
    """A literal Python itself refuses (an unhashable key) read as a constant: the file's own error, one line."""
    path = tmp_path / "unhashable.py"
    path.write_text(SOFTPLUS + line + "\n")
    out = _marathon("problem", str(path), "--device", "cpu")
    assert out.returncode == 2, out.stderr
    assert "unhashable" in out.stderr and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


GROUPED = '''"""Rows projected, then normalised in groups of channels."""
import torch
from torch import nn

batch_size = 256
features = 1024
groups = 64


class Model(nn.Module):
    def __init__(self, features, groups):
        super().__init__()
        self.proj = nn.Linear(features, features)
        self.norm = nn.GroupNorm(groups, features)

    def forward(self, x):
        return self.norm(self.proj(x))


def get_inputs():
    return [torch.rand(batch_size, features)]


def get_init_inputs():
    return [features, groups]
'''


def test_small_sizes_are_not_ones_whose_reference_is_rounding_noise(tmp_path):
    """Halved to its budget, this file had one channel per group (features 64, groups 64): every
    normalised value is its group's mean, zero, and the float32 reference is noise no kernel can
    match. The sizes chosen keep groups of several channels."""
    from kernels.problems.kernelbench_facts import NOISE_REL, rounding_noise
    from kernels.problems.kernelbench_runtime import FileReference
    paths = _write(tmp_path, grouped=GROUPED)
    out = _marathon("problem", paths["grouped"], "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    smoke = json.loads(out.stdout)["shapes"]["smoke"][0]
    assert smoke["features"] // smoke["groups"] >= 2, smoke
    ref = FileReference("grouped", GROUPED)
    assert rounding_noise(ref, smoke) <= NOISE_REL
    assert rounding_noise(ref, {**smoke, "features": 64, "groups": 64}) > 0.1  # what was chosen before


CENTRED_MEAN = GROUPED.replace("return self.norm(self.proj(x))", "return self.norm(self.proj(x)).mean(dim=1)")


def test_a_reference_that_is_rounding_noise_at_every_size_is_said_so(tmp_path):
    """The mean of values normalised in groups is zero at any size: the check says that no kernel can be
    judged correct there, rather than leave a night's run to find out."""
    paths = _write(tmp_path, centred=CENTRED_MEAN)
    out = _marathon("problem", paths["centred"], "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    assert "rounding noise" in json.loads(out.stdout)["chosen"]
    out = _marathon("problem", paths["centred"], "--device", "cpu")
    assert "WARNING: the reference there is rounding noise" in out.stdout
    grouped = _marathon("problem", _write(tmp_path, grouped=GROUPED)["grouped"], "--device", "cpu", "--json")
    assert "rounding noise" not in json.loads(grouped.stdout)["chosen"]
