"""The candidate process's source check (kernels/evaluator/candidate_process.py, SourceCheck): the text
Triton takes for each of the candidate's kernels (the JIT's `src`, the interpreter's re-read lines) must
parse to the very function the static policy checked. The hostile files hide a second kernel in a string
spanning lines, which Triton's line scanners take for the kernel; honest kernels match."""
import ast
import importlib.util
import inspect
import itertools
from pathlib import Path

import pytest
import triton
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from kernels.evaluator.candidate_process import SourceCheck
from kernels.problems.spec import get_problem, resolve_kernel

ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ROOT / "tests" / "hostile"
_names = itertools.count()


def load(source: str, tmp_path: Path, interpret: bool):
    """The source as a module, its kernels built by Triton's JIT (or interpreter); and its SourceCheck."""
    path = tmp_path / f"cand_{next(_names)}.py"
    path.write_text(source)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(triton.knobs.runtime, "interpret", interpret)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module, SourceCheck(source, (str(path),))


def kernels(module) -> list:
    return [v for v in vars(module).values() if isinstance(v, (JITFunction, InterpretedFunction, triton.runtime.Autotuner,
                                                                triton.runtime.Heuristics))]


@pytest.mark.parametrize("interpret", [False, True], ids=["jit", "interpreter"])
@pytest.mark.parametrize("problem, kernel", [("mla_decode", "starter"), ("mla_decode", "tuned"), ("kda", "starter")])
def test_honest_kernels_match(problem, kernel, interpret, tmp_path):
    module, check = load(resolve_kernel(get_problem(problem), kernel)[1], tmp_path, interpret)
    found = kernels(module)
    assert found
    assert [check.check(k) for k in found] == [None] * len(found)
    check.module(module)
    assert check.mismatches == []


def test_the_jit_reads_the_kernel_hidden_in_a_decorator(tmp_path):
    module, check = load((HOSTILE / "mla_jit_decorator_source_confusion.py").read_text(), tmp_path, False)
    hidden = ast.parse(module._decode_head.src).body[0]  # the hole: the JIT's text parses to the string's kernel
    assert any(isinstance(n, ast.For) for n in hidden.body) and not any(isinstance(n, ast.For) for n in ast.parse(
        inspect.getsource(module._decode_head.fn)).body[0].body)
    assert "not that function" in check.check(module._decode_head)
    assert check.mismatches == ["_decode_head (line 17): the text Triton takes for it is not that function"]


def test_the_interpreter_reads_the_kernel_hidden_in_a_string(tmp_path):
    module, check = load((HOSTILE / "mla_interpreter_source_confusion.py").read_text(), tmp_path, True)
    assert isinstance(module._bump, InterpretedFunction)
    check.module(module)
    assert check.mismatches == ["_bump (line 20): the text Triton takes for it is not that function"]


def test_the_interpreter_is_held_to_the_jits_cut_too(tmp_path):
    """On the CPU the decorator's hidden kernel is not what the interpreter runs, but it is what a GPU
    compiles: the interpreted function is held to the JIT's cut as well, before any launch."""
    module, check = load((HOSTILE / "mla_jit_decorator_source_confusion.py").read_text(), tmp_path, True)
    assert "not that function" in check.check(module._decode_head)


def test_wrappers_are_unwrapped_and_functions_not_checked_are_refused(tmp_path):
    source = (HOSTILE / "mla_interpreter_source_confusion.py").read_text()
    module, check = load(source, tmp_path, True)
    wrapped = triton.autotune(configs=[triton.Config({})], key=[])(triton.heuristics({"X": lambda a: 1})(module._bump))
    assert "not that function" in check.check(wrapped)
    # a function that the checked source does not hold at that line (the source changed underneath)
    other = SourceCheck(source.replace("import torch\n", "import torch\n\n", 1), (module.__file__,))
    assert "no such function in the checked source" in other.check(module._bump)


def test_a_helpers_text_changed_after_its_check_stops_every_later_launch(tmp_path):
    """A helper the launched kernel calls is compiled from its own text, with no launch of its own to be
    checked at: a change to any matched function's text is seen at the next launch of any kernel."""
    module, check = load(resolve_kernel(get_problem("mla_decode"), "starter")[1], tmp_path, False)
    found = [k for k in kernels(module) if isinstance(k, JITFunction)]
    assert found and [check.check(k) for k in found] == [None] * len(found)
    assert check.drifted() is None
    found[0]._src = found[0]._src.replace("tl.", "tl. ", 1)  # what _unsafe_update_src would do
    assert "its text changed after it was checked" in check.drifted()
    assert check.mismatches
