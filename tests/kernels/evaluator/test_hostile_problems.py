"""Hostile KernelBench-format problem files against the judge (kernels/evaluator/judge.py), through `marathon eval`
on the CPU: what a file's process hands the judge is checked there, out of the file's reach. Each case has an
honest control: the same file without the hostile line."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernels.evaluator.judge import Judge

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(300)

SCALE = '''"""Rows scaled by a learned vector: y = x * w."""
import torch
from torch import nn

rows = 1000
cols = 1000


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.w = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return x * self.w


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]
'''

# a candidate that ignores its inputs and writes zeros: wrong for any honest reference
ZEROS = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.zeros([BLOCK], dtype=tl.float32), mask=o < n)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.w = nn.Parameter(torch.empty(cols))

    def forward(self, x):
        y = torch.empty_like(x)
        _zeros[(triton.cdiv(y.numel(), 128),)](y, y.numel(), BLOCK=128)
        return y
'''

FORWARD = "        return x * self.w\n"


def _eval(tmp_path: Path, problem: str, candidate: str, shape: str = "rows=3,cols=45") -> subprocess.CompletedProcess:
    (tmp_path / "scale.py").write_text(problem)
    (tmp_path / "cand.py").write_text(candidate)
    return subprocess.run([sys.executable, "marathon.py", "eval", "--problem", str(tmp_path / "scale.py"), "--kernel",
                           str(tmp_path / "cand.py"), "--device", "cpu", "--json", "--no-baselines", "--shape",
                           shape], cwd=ROOT, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("hostile", [
    "        return x * self.w * float('nan')\n",  # every value NaN: NaN compares false, so no test ever failed
    "        return x * self.w / (x - x)[0, 0]\n",  # Inf (and NaN where x * w is 0)
    "        return (x * self.w)[:, :0]\n",  # no value at all
], ids=["nan", "inf", "empty"])
def test_a_reference_that_cannot_judge_is_the_problems_failure_not_an_ok(tmp_path, hostile):
    out = _eval(tmp_path, SCALE.replace(FORWARD, hostile), ZEROS)
    assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "its reference at rows=3,cols=45" in lines[0], out.stderr
    assert "Traceback" not in out.stderr and '"ok"' not in out.stdout


def test_marathon_problem_says_before_a_run_that_such_a_reference_cannot_judge(tmp_path):
    """The check a user runs before a night's run refuses what the judge would refuse: exit 2, one line;
    the honest file at the same size is ok."""
    (tmp_path / "scale.py").write_text(SCALE.replace(FORWARD, "        return (x * self.w).log()\n"))
    (tmp_path / "honest.py").write_text(SCALE)

    def problem(name):
        return subprocess.run([sys.executable, "marathon.py", "problem", str(tmp_path / name), "--shape",
                               "rows=3,cols=45", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    out = problem("scale.py")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "its reference at rows=3,cols=45 holds NaN or Inf" in out.stderr
    (call,) = json.loads(out.stdout)["reference"]
    assert call["status"] == "error"
    honest = problem("honest.py")
    assert honest.returncode == 0 and json.loads(honest.stdout)["reference"][0]["status"] == "ok", honest.stderr


def test_control_the_zeros_candidate_is_incorrect_on_the_honest_file(tmp_path):
    out = _eval(tmp_path, SCALE, ZEROS)
    assert out.returncode == 1, out.stderr[-2000:]
    assert json.loads(out.stdout)["status"] == "incorrect"


def test_the_comparison_fails_closed_and_never_broadcasts():
    """The judge's one comparison (behind the reference's own check): a NaN anywhere, in the output or the
    reference, is wrong, and an output of another shape is wrong even where it would broadcast."""
    judge = SimpleNamespace(tolerance=SimpleNamespace(rel=1e-3, abs_frac=1e-2))
    ref = torch.ones(4, 8)
    assert Judge._wrong(judge, ref.clone(), ref)[2] is None  # control
    for bad_ref in (torch.full((4, 8), float("nan")), torch.full((4, 8), float("inf"))):
        assert Judge._wrong(judge, torch.zeros(4, 8), bad_ref)[2]
    assert "shape" in Judge._wrong(judge, torch.ones(1, 8), ref)[2]
    assert "shape" in Judge._wrong(judge, torch.ones(4, 8), torch.ones(1, 8))[2]


def test_a_problems_error_drives_no_terminal_and_stays_one_line(tmp_path):
    """The file's exception carries escape sequences (retitle the terminal, clear the screen) and a bidi
    override: what the user reads shows them as text. Control: the same error in plain words."""
    raises = "        raise ValueError('\\x1b]0;owned\\x07\\x1b[2J\\u202eSTOP' + 'A' * 100000)\n"
    out = _eval(tmp_path, SCALE.replace(FORWARD, raises), ZEROS)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-2000:]
    assert "\x1b" not in out.stderr and "\x07" not in out.stderr and "\u202e" not in out.stderr
    assert "\\x1b]0;owned" in out.stderr and len(out.stderr) < 2000
    plain = _eval(tmp_path, SCALE.replace(FORWARD, "        raise ValueError('plain words')\n"), ZEROS)
    assert plain.returncode == 2 and "ValueError: plain words" in plain.stderr, plain.stderr[-2000:]


def test_scrub_shows_controls_as_text_in_values_and_keys():
    from kernels.evaluator.confinement import scrub
    env = {"OPENAI_API_KEY": "sk-canary-scrub-1234"}
    out = scrub({"k\x1b[2J": ["a\x1b]0;t\x07b", "line\r\nnext\rover\ttab", "sk-canary-scrub-1234"],
                 "sk-canary-scrub-1234": 1}, env)
    assert out == {"k\\x1b[2J": ["a\\x1b]0;t\\x07b", "line\nnext\nover\ttab", "[$OPENAI_API_KEY]"],
                   "[$OPENAI_API_KEY]": 1}


ARGMAX = '''"""Index of the largest value of each row."""
import torch
from torch import nn

rows = 1000
cols = 1000


class Model(nn.Module):
    def forward(self, x):
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

ARGMAX_KERNEL = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _argmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    o = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + r * cols + o, mask=o < cols, other=-float("inf"))
    tl.store(y_ptr + r, tl.argmax(v, axis=0).to(tl.int64))


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
        _argmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''

# the reference is complex (real part x, imaginary part 2x); the candidate writes the real parts only and
# leaves the imaginary ones as the poison fill (NaN)
COMPLEX_FORWARD = "        return torch.complex(x, 2 * x)\n"
REAL_PART_ONLY = '''import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def _real_only(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    tl.store(y_ptr + 2 * o, tl.load(x_ptr + o, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.w = nn.Parameter(torch.empty(cols))

    def forward(self, x):
        yr = torch.empty(*x.shape, 2, device=x.device)
        _real_only[(triton.cdiv(x.numel(), 128),)](x, yr, x.numel(), BLOCK=128)
        return yr.view(torch.complex64).squeeze(-1)
'''


def test_an_integer_output_is_judged_in_its_own_dtype_in_timed_calls_too(tmp_path):
    """argmax (KernelBench level 1 has it) returns int64: an honest kernel's timed calls were held to the
    inputs' dtype (float32) and it was judged incorrect."""
    out = _eval(tmp_path, ARGMAX, ARGMAX_KERNEL)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    assert json.loads(out.stdout)["status"] == "ok"


@pytest.mark.parametrize("answer, status", [("tl.argmax(v, axis=0)", "ok"),
                                            ("((tl.argmax(v, axis=0) // 2) * 2)", "incorrect")])
def test_integer_outputs_are_compared_exactly(tmp_path, answer, status):
    """An index off by one is wrong, however large the indices: a tolerance scaled by the largest
    reference value (4095 here) would let half of the rows point at the wrong column."""
    kernel = ARGMAX_KERNEL.replace("tl.argmax(v, axis=0)", answer)
    verdict = json.loads(_eval(tmp_path, ARGMAX, kernel, shape="rows=4,cols=4096").stdout)
    assert verdict["status"] == status, verdict["reason"]
    if status == "incorrect":
        assert "compared exactly" in verdict["reason"]


def test_a_complex_output_is_the_problems_failure_not_judged_by_its_real_part(tmp_path):
    """Compared as float32, a complex output kept its real part only: a kernel that left every imaginary
    part NaN passed correctness. Now the problem is refused in one line, before any candidate call."""
    out = _eval(tmp_path, SCALE.replace(FORWARD, COMPLEX_FORWARD), REAL_PART_ONLY)
    assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "complex64" in lines[0] and "view_as_real" in lines[0], out.stderr
    assert '"ok"' not in out.stdout


def test_the_judge_refuses_a_complex_output_whatever_the_problems_process_says():
    """The judge's own gates, out of the problem's code's reach: the output spec's dtype, and the
    comparison (a complex output against a float reference fails closed)."""
    from kernels.evaluator import protocol
    from kernels.evaluator.judge import ProblemFailed, RemoteFileProblem
    remote = RemoteFileProblem(SimpleNamespace(name="scale"), "cpu")
    for name, refused in (("complex64", True), ("int64", False), ("float32", False)):
        remote._specs.clear()
        remote._request_reply = lambda cmd, expect, name=name: protocol.SpecReply(shape=[3, 45], dtype=name,
                                                                                   input_bytes=540)
        if refused:
            with pytest.raises(ProblemFailed, match="compares real"):
                remote.output_spec({"rows": 3}, torch.float32)
        else:
            assert remote.output_spec({"rows": 3}, torch.float32) == ((3, 45), getattr(torch, name))
    judge = SimpleNamespace(tolerance=SimpleNamespace(rel=1e-3, abs_frac=1e-2))
    ref = torch.ones(4, 8)
    assert "dtype" in Judge._wrong(judge, torch.complex(ref, torch.full_like(ref, float("nan"))), ref)[2]


# Declarations the worker, the CLI and the judge read from the file's syntax (kernels/problems/kernelbench.py),
# outside any fence: each is bounded and refused in one line. Before, the first held the interpreter (and
# the GIL: a worker's every activity and heartbeat) for hours, the nested ones and the malformed shapes
# ended in a traceback, and the FLOPS expression ran in the judge as unbounded integer arithmetic.
_HOSTILE_DECLARATIONS = {
    "literal-power-tower": ("huge = (((((3**64)**64)**64)**64)**64)\nSMOKE_SHAPES = 1\n", "SMOKE_SHAPES must be"),
    "nested-sum": ("huge = " + "+".join(["1"] * 30000) + "\n", "nested too deeply"),
    "nested-negation": ("huge = " + "-" * 100000 + "1\n", "nested too deeply"),
    "smoke-infinity": ("SMOKE_SHAPES = [{'rows': 1e999}]\n", "SMOKE_SHAPES must be"),
    "smoke-text": ("SMOKE_SHAPES = [{'rows': 'x'}]\n", "SMOKE_SHAPES must be"),
    "probe-not-a-pair": ("PROBE_RANGES = {'cpu': {'rows': 5}}\n", "PROBE_RANGES must be"),
    "probe-empty-range": ("PROBE_RANGES = {'cpu': {'rows': (9, 1)}}\n", "PROBE_RANGES must be"),
    "flops-power-tower": ("FLOPS = 'rows ** rows ** rows'\n", "OverflowError"),
    "flops-factorial": ("FLOPS = 'math.factorial(rows)'\n", "FLOPS may use"),
}


@pytest.mark.parametrize("declaration, says", list(_HOSTILE_DECLARATIONS.values()), ids=list(_HOSTILE_DECLARATIONS))
def test_a_files_declarations_are_bounded_and_refused_in_one_line(tmp_path, declaration, says):
    (tmp_path / "scale.py").write_text(SCALE + "\n" + declaration)
    out = subprocess.run([sys.executable, "marathon.py", "problem", str(tmp_path / "scale.py"), "--device", "cpu",
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", (out.stdout[-2000:], out.stderr[-2000:])
    assert says in out.stderr and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_literal_arithmetic_and_flops_stay_bounded_and_honest_values_are_kept():
    """The bounds refuse only what could not be a size or a count: the honest file's values are as written."""
    from kernels.problems.kernelbench import file_problem, literal_facts, tensor_flops
    facts = literal_facts("scale", SCALE + "big = 2**64 * 2**64\nhuge = ((2**64)**64)**64\nn = 1024 * 2 ** 4\n")
    assert facts.dims["big"] == 2**128 and facts.dims["n"] == 16384 and "huge" not in facts.dims
    spec = file_problem("scale", SCALE + "FLOPS = '2 * rows * cols + math.sqrt(rows)'\n"
                        "PROBE_RANGES = {'cpu': {'rows': (1, 9)}}\nSMOKE_SHAPES = [{'rows': 3, 'cols': 45}]\n")
    assert tensor_flops(spec, {"rows": 4, "cols": 9}) == 74.0
    assert spec.probe_ranges == {"cpu": {"rows": (1, 9)}} and spec.shape_sets["smoke"] == [{"rows": 3, "cols": 45}]
    with pytest.raises(ValueError, match="OverflowError"):
        tensor_flops(file_problem("scale", SCALE + "FLOPS = 'rows ** cols'\n"), {"rows": 1000, "cols": 1000})


# a candidate off by a factor of 3 everywhere: wrong under any tolerance below 1
TRIPLE = ZEROS.replace("def _zeros(y_ptr, n,", "def _zeros(x_ptr, w_ptr, y_ptr, n, cols,").replace(
    "tl.store(y_ptr + o, tl.zeros([BLOCK], dtype=tl.float32), mask=o < n)",
    "m = o < n\n    tl.store(y_ptr + o, 3 * tl.load(x_ptr + o, mask=m) * tl.load(w_ptr + o % cols, mask=m), mask=m)").replace(
    "](y, y.numel(), BLOCK=128)", "](x, self.w, y, y.numel(), x.shape[1], BLOCK=128)")


@pytest.mark.parametrize("tolerance", ["{'rel': 1e999, 'abs_frac': 1e999}", "{'rel': 1e9, 'abs_frac': 5.0}",
                                       "{'rel': 0.5, 'abs_frac': 0}"], ids=["infinite", "huge", "abs-zero"])
def test_a_tolerance_no_output_can_fail_is_refused(tmp_path, tolerance):
    """A TOLERANCE at which an output of zeros passes (a limit of 1 or more, inf included) judges nothing:
    before, the first two gave a candidate off by a factor of 3 `ok`. Refused in one line, as a limit of 0
    or less (nothing passes). Control: with the file's default tolerance that candidate is incorrect."""
    out = _eval(tmp_path, SCALE + f"\nTOLERANCE = {tolerance}\n", TRIPLE)
    assert out.returncode == 2 and '"ok"' not in out.stdout, (out.stdout[-2000:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "TOLERANCE must be" in lines[0], out.stderr
    control = _eval(tmp_path, SCALE, TRIPLE)
    assert control.returncode == 1 and json.loads(control.stdout)["status"] == "incorrect", control.stderr[-2000:]


# writes 32 MiB into the compiler cache its process may write (its own file's, kept across evaluations),
# in its own process only (the candidate's runs the top level too, under the seal): at once, or from a
# thread, a MiB at a time, while the evaluation goes on
_FILL = """import os
import threading
import time
import torch

_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")


def _fill(pause):
    with open(os.path.join(_cache, "filler.bin"), "wb") as f:
        for _ in range(32):
            f.write(os.urandom(2**20))
            f.flush()
            time.sleep(pause)


if "marathon-problem-cache" in _cache:
    CALL
"""
CACHE_FILLERS = {"at-once": SCALE.replace("import torch\n", _FILL.replace("CALL", "_fill(0)"), 1),
                 "from-a-thread": SCALE.replace("import torch\n", _FILL.replace(
                     "CALL", "threading.Thread(target=_fill, args=(0.1,), daemon=True).start()"), 1)}


@pytest.mark.parametrize("how", list(CACHE_FILLERS))
def test_a_problem_filling_its_compiler_cache_is_stopped_by_the_disk_quota(tmp_path, how):
    """The problem's compiler caches outlive the evaluation and were weighed by no quota: a file could leave
    any number of bytes on the worker's disk. Now they count against the sandbox's quota like its scratch
    folder, also after every reply and once the process is gone; past it the cache is removed (and a
    problem seen over it fails in one line)."""
    import hashlib
    import tempfile
    filler = CACHE_FILLERS[how]
    cache = Path(tempfile.gettempdir()) / "marathon-problem-cache" / hashlib.sha256(filler.encode()).hexdigest()[:24]
    (tmp_path / "scale.py").write_text(filler)
    (tmp_path / "cand.py").write_text(ZEROS)
    out = subprocess.run([sys.executable, "marathon.py", "eval", "--problem", str(tmp_path / "scale.py"), "--kernel",
                          str(tmp_path / "cand.py"), "--device", "cpu", "--json", "--no-baselines", "--shape",
                          "rows=3,cols=45"], cwd=ROOT, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "MARATHON_SANDBOX_DISK": str(8 * 2**20)})
    assert not (cache / "inductor" / "filler.bin").exists()
    assert '"ok"' not in out.stdout
    if how == "at-once":
        assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "problem scale" in lines[0] and "quota" in lines[0], out.stderr


def test_other_problem_files_caches_are_bounded(tmp_path):
    """Anyone who can start a run can hand in many problem files, each leaving a compiler cache (each
    under the disk quota): past the most recently used few, the others go, save one a live evaluation
    holds or one just made."""
    import os
    import time

    from kernels.evaluator import isolation
    from kernels.evaluator.judge import prune_problem_caches
    root, now = tmp_path / "caches", time.time()
    caches = [root / f"c{i:02d}" for i in range(12)]
    for i, cache in enumerate(caches):
        (cache / "triton").mkdir(parents=True)
        (cache / "triton" / "k.bin").write_bytes(b"x" * 100)
        os.utime(cache, (now - 3600 + i, now - 3600 + i))  # c00 least recently used
    young = root / "young"
    young.mkdir()
    (root / "link").symlink_to(caches[0])
    mine = caches[5]
    hold = isolation.hold_folder(caches[1], shared=True)  # a live evaluation of that file
    try:
        removed = prune_problem_caches(root, mine, kept=4)
    finally:
        os.close(hold)
    # 14 others (12 caches but mine, the young one, the link): the 4 most recent stay (c11, c10, young
    # and the link, which is never followed), c01 is held, the rest go
    assert sorted(removed) == [f"c{i:02d}" for i in (0, 2, 3, 4, 6, 7, 8, 9)]
    assert all(p.exists() for p in (mine, caches[1], caches[10], caches[11], young)) and (root / "link").is_symlink()


# --- references that swell in the judge's memory, or are not what was asked for ---------------------------
# the file's top level replaces the writer its process saves references with (kernels/evaluator/tensor_file.py):
# the values right, the file not
HOSTILE_WRITE = '''
import json as _json
from kernels.evaluator import tensor_file as _tensor_file
_real_write = _tensor_file.write


def _hostile_write(t, path):
    t = t.detach().float().contiguous()
    shape = list(t.shape)
    if MODE == "wrong-shape":
        return _real_write(t.reshape(-1), path)
    if MODE == "wrong-dtype":
        return _real_write(t.half(), path)
    if MODE == "claims-more":  # a header for a far bigger tensor than the judge asked for
        shape[-1] += 2**22
    payload = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    if MODE == "longer":  # the header right, more bytes after the tensor's
        payload += bytes(2**16)
    with open(path, "wb") as f:
        f.write(_json.dumps({"dtype": "float32", "shape": shape}).encode() + b"\\n" + payload)


_tensor_file.write = _hostile_write
'''


@pytest.mark.parametrize("mode, says", [
    ("claims-more", "saved a reference that claims 50332188 bytes where at most 1049116 were asked for"),
    ("longer", "saved a reference that is 66115 bytes long where its header says 579"),
    ("wrong-shape", "its reference at rows=3,cols=45 is a torch.float32 tensor of shape (135,), not a float32"),
    ("wrong-dtype", "its reference at rows=3,cols=45 is a torch.float16 tensor of shape (3, 45), not a float32"),
], ids=["claims-more", "longer", "wrong-shape", "wrong-dtype"])
def test_a_reference_file_that_is_not_the_one_asked_for_is_the_problems_failure(tmp_path, mode, says):
    """The judge reads what the file's process saved, whatever code wrote it: a header claiming more bytes
    than the reference it asked for (refused before anything is allocated), more bytes than its header
    says, or a well-formed file of another shape or dtype, is the problem's failure."""
    hostile = SCALE.replace("class Model", f"MODE = {mode!r}\n{HOSTILE_WRITE}\n\nclass Model")
    out = _eval(tmp_path, hostile, ZEROS)
    assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr
    assert "Traceback" not in out.stderr and '"ok"' not in out.stdout


def test_control_an_honest_reference_that_is_a_view_is_judged(tmp_path):
    """An honest Model may return a view of a bigger tensor: its process saves the view's own bytes."""
    view = SCALE.replace(FORWARD, "        return torch.cat([x * self.w, x], 1)[:, :x.shape[1]]\n")
    out = _eval(tmp_path, view, ZEROS)
    assert out.returncode == 1, out.stderr[-2000:]
    assert json.loads(out.stdout)["status"] == "incorrect"


def test_a_candidate_output_file_that_is_not_the_one_asked_for_is_rejected(tmp_path):
    """The candidate's outputs come back the same way: a header claiming more than was asked for, a
    payload longer or shorter than its header says, or no header at all: rejected; the honest file loads."""
    from kernels.evaluator import tensor_file
    from kernels.evaluator.judge import Outcome, _load_output
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    honest = tmp_path / "honest.pt"
    tensor_file.write(t, honest)
    assert torch.equal(_load_output(honest, 48 + 2**20), t)
    head = b'{"dtype": "float32", "shape": [3, 4]}\n'
    payload = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    claims = tmp_path / "claims.pt"
    claims.write_bytes(b'{"dtype": "float32", "shape": [3, 262148]}\n' + payload)
    longer = tmp_path / "longer.pt"
    longer.write_bytes(head + payload + bytes(2**20))
    shorter = tmp_path / "shorter.pt"
    shorter.write_bytes(head + payload[:-1])
    pickled = tmp_path / "pickled.pt"
    torch.save(t, pickled)
    for path, says in ((claims, "claims 3145776 bytes where at most 1048624 were asked for"),
                       (longer, f"is {len(head) + 48 + 2**20} bytes long where its header says {len(head) + 48}"),
                       (shorter, f"is {len(head) + 47} bytes long where its header says {len(head) + 48}"),
                       # what torch.save writes (a zip archive): refused, never unpickled
                       (pickled, ("has no header line", "has a header that is not ASCII JSON"))):
        with pytest.raises(Outcome) as caught:
            _load_output(path, 48 + 2**20)
        assert caught.value.status == "rejected", caught.value.reason
        prefix = f"the candidate's output {path.name} "
        assert caught.value.reason.startswith(tuple(prefix + s for s in ([says] if isinstance(says, str) else says))), \
            caught.value.reason
    (tmp_path / "fifo.pt").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "fifo.pt")
    with pytest.raises(Outcome, match="the candidate's output fifo.pt is not a regular file") as caught:
        _load_output(tmp_path / "fifo.pt", 48 + 2**20)
    assert caught.value.status == "rejected"
    (tmp_path / "link.pt").symlink_to(honest)
    with pytest.raises(Outcome, match="the candidate's output link.pt could not be read") as caught:
        _load_output(tmp_path / "link.pt", 48 + 2**20)
    assert caught.value.status == "incorrect"
