"""How well conditioned a file problem's reference is on its inputs widened to both signs (the judge's
check of a kernel right only on the problem's own input distribution: kernels/evaluator/judge.py
_widened_check), over KernelBench's level1 and level2 files, untouched, at the small sizes each
chooses for a CPU.

Per file: which inputs are of one sign (and so widened), whether the module's output stays finite on
the widened inputs (else the judge skips the check), and the relative L2 distance of its float32
output from its own float64 output there: the error an honest kernel as accurate as torch's would
have. The judge allows WIDENED_LOOSENESS times the problem's tolerance; this shows the margin.

    python bench/widened_inputs.py --root KERNELBENCH_CHECKOUT [--out FILE]

The files' code runs in this process, unfenced: for files you trust (KernelBench's own)."""
from __future__ import annotations

import argparse
import platform
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = ("level1", "level2")
FILE_LIMIT_S = 120
WIDEN_SEED = 3


class _Late(Exception):
    pass


def survey(path: Path) -> dict:
    import torch

    from kernels.problems.kernelbench import full_shape, literal_facts
    from kernels.problems.kernelbench_facts import file_facts, rounding_noise
    from kernels.problems.kernelbench_runtime import FileReference

    source = path.read_text()
    ref = FileReference(path.stem, source)
    syntax = literal_facts(path.stem, source)
    facts = file_facts(ref, syntax.dims, syntax.constants, small=True)
    shape = full_shape(facts.sizes, facts.small or {})
    row: dict = {"shape": shape, "own_noise": facts.small_noise}
    inputs = ref.make_inputs(shape, 0, "cpu", torch.float32)
    row["widened"] = ref.widen(inputs, WIDEN_SEED)
    if not row["widened"]:
        return row
    row["finite"] = bool(torch.isfinite(ref.reference(**inputs)).all())
    if row["finite"]:
        row["widened_noise"] = rounding_noise(ref, shape, widen_seed=WIDEN_SEED)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True, help="a KernelBench checkout (holding KernelBench/level1, level2)")
    ap.add_argument("--out", type=Path, default=Path(".marathon") / "bench" / "widened_inputs.json")
    args = ap.parse_args(argv)
    folders = [f for level in LEVELS for f in (args.root / level, args.root / "KernelBench" / level) if f.is_dir()]
    if len(folders) != len(LEVELS):
        print(f"widened_inputs.py: {args.root} holds no KernelBench/level1 and level2", file=sys.stderr)
        return 2

    import subprocess

    import torch
    import triton

    from kernels.evaluator.judge import WIDENED_LOOSENESS
    from kernels.evaluator.result_record import Host, ResultRecord
    from kernels.problems.kernelbench_facts import NOISE_REL

    torch.set_num_threads(1)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or None
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def late(*_):
        raise _Late()

    signal.signal(signal.SIGALRM, late)
    files: dict[str, dict] = {}
    for path in sorted(p for f in folders for p in f.glob("*.py") if p.name != "__init__.py"):
        key = f"{path.parent.name}/{path.name}"
        signal.alarm(FILE_LIMIT_S)
        try:
            files[key] = survey(path)
        except _Late:
            files[key] = {"error": f"over {FILE_LIMIT_S} s"}
        except Exception as exc:  # noqa: BLE001 - the file's own failure, recorded
            files[key] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        finally:
            signal.alarm(0)
        print(f"{key}: {files[key]}", flush=True)
    rows = files.values()
    widened = [r for r in rows if r.get("widened")]
    judged = [r for r in widened if r.get("widened_noise") is not None]
    noisy_anyway = [r for r in judged if (r.get("own_noise") or 0) > NOISE_REL]  # degenerate on its own inputs too
    clean = [r["widened_noise"] for r in judged if (r.get("own_noise") or 0) <= NOISE_REL]
    figures = {"files": len(files), "errors": sum("error" in r for r in rows), "widened": len(widened),
               "not_finite_when_widened": sum(r.get("finite") is False for r in widened),
               "degenerate_on_own_inputs": len(noisy_anyway),
               "max_widened_noise_of_the_rest": max(clean) if clean else None,
               "looseness": WIDENED_LOOSENESS, "noise_rel": NOISE_REL, "per_file": files}
    print({k: v for k, v in figures.items() if k != "per_file"})
    record = ResultRecord(
        measurement="KernelBench level1+level2 files, untouched, at their CPU small sizes: inputs of one sign widened "
                    "to both (x +-2), whether the output stays finite, and its float32 distance from float64 there",
        host=Host(gpu="cpu", driver=None, torch=torch.__version__, triton=triton.__version__,
                  python=platform.python_version(), baseline_libraries={}),
        command="python bench/widened_inputs.py --root KERNELBENCH", date=started, commit=commit, figures=figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(record.model_dump_json(indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
