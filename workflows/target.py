"""What the run optimizes, behind the small interface the run loop uses: how the run starts (resolve the
target, judge the starting point, state the goal) and how it checks its result at the end. The one
target today is a GPU kernel against a problem's reference and baselines; a test suite's time or a
bundle's size would be another `Target`, with tools of its own. Runs inside the workflow."""
from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from compaction.memory import Goal, empty_memory
    from workflows import names
    from kernels.labels import shape_label
    from workflows.models import Attempt, EvalInput, EvalResult, PrepareInput, RunSetup
    from workflows.records import TASK_BASELINE

from workflows.dispatch import ToolDispatch
from workflows.run import Run, short


class Target(Protocol):
    async def start(self) -> str:
        """Resolve what is optimized and judge the starting point (the run's first tool call); the run's
        setup, attempt 0 and memory are set. Returns what that judgement answered."""

    async def check_best(self) -> None:
        """After the loop: a last check of the best the run hands back."""


class KernelTarget:
    def __init__(self, run: Run, tools: ToolDispatch) -> None:
        self.run, self.tools = run, tools

    async def start(self) -> str:
        run, st, spec = self.run, self.run.state, self.run.spec
        st.started_at = workflow.now()
        run.step = "preparing"
        try:
            setup: RunSetup = await workflow.execute_activity(
                names.PREPARE_RUN, PrepareInput(problem=spec.problem, problem_source=spec.problem_source,
                                                task=spec.task, kernel=spec.kernel, source=spec.source,
                                                eval=spec.eval, inline_source_cap=spec.inline_source_cap),
                result_type=RunSetup, start_to_close_timeout=timedelta(seconds=spec.tool_timeout_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout_s),
                retry_policy=RetryPolicy(maximum_attempts=5), summary=f"prepare {spec.problem} from {spec.kernel}")
        except ActivityError as err:
            run.fault_over(names.PREPARE_RUN)
            raise ApplicationError(f"cannot start the run: {err.cause or err}", type="BadRunSpec",
                                   non_retryable=True) from err
        st.setup = setup
        await run.recovered(names.PREPARE_RUN)
        st.attempts.append(Attempt(n=0, origin="start", sha256=setup.start.sha256, lines=setup.start.lines,
                                   config=setup.config))
        st.current, st.current_source = 0, setup.start
        await run.notebook(f"start: {spec.problem}, {setup.kernel_label}{'' if spec.task else ' kernel'} as attempt 0, policy {st.policy}, "
                           f"budget {st.budget_tool_calls} tool calls / {st.budget_hours:g} h")
        text = await self.tools.call(names.PROFILE_KERNEL, {}, call_id="start")
        goal = self._goal()
        st.memory = (spec.memory.model_copy(update={"goal": goal, "hints": list(st.hints)}) if spec.memory
                     else empty_memory(goal, hints=st.hints))
        return text

    def _goal(self) -> Goal:
        st = self.run.state
        setup = st.setup
        baselines: list[str] = []
        start_eval = st.attempts[0].evals[-1] if st.attempts and st.attempts[0].evals else None
        if start_eval is not None:
            baselines = list(start_eval.speedups)
        target = "be faster than every baseline on every shape, and stay correct"
        if st.target_speedup:
            target = f"reach {st.target_speedup:g}x over the strongest baseline on every shape (the run stops there)"
        if start_eval is not None and start_eval.latency_us is not None:
            vs = ", ".join(f"{v:.3g}x vs {k}" for k, v in start_eval.speedups.items())
            target += f"; the starting kernel measured {start_eval.latency_us:.4g} us" + (f" ({vs})" if vs else "")
        shapes = "; ".join(shape_label(s) for s in setup.shapes)
        shapes = (f"{setup.shape_set}: {shapes}" if setup.shape_set
                  else shapes or "smoke on a CPU worker, bench on a CUDA worker")
        return Goal(problem=setup.problem, statement=setup.statement, target=target, baselines=baselines,
                    shapes=shapes, device=setup.device)

    async def check_best(self) -> None:
        """Test the kernel handed back for correctness on the problem's sweep shapes, once, on a GPU
        worker. The run's evaluations saw their own shapes and one random probe each, and a kernel can
        be fast there and wrong elsewhere: the shipped KDA kernel was once wrong at every one-chunk
        length, and only the sweep showed it. Skipped where the best was judged on a CPU (sweep shapes
        are GPU-sized), where the run was already judged on the sweep, and when a stop was asked for."""
        run, st, spec = self.run, self.run.state, self.run.spec
        b = st.best
        if not spec.eval.sweep_best or b is None or st.setup is None:
            return
        if b.verdict.device != "cuda" or spec.eval.shapes == "sweep" or st.stop_requested:
            return
        run.step = f"testing the best (attempt {b.attempt}) on the sweep shapes"
        settings = spec.eval.model_copy(update={"shapes": "sweep", "shape_list": [], "baselines": False, "ncu": False})
        try:
            res: EvalResult = await workflow.execute_activity(
                names.TEST_KERNEL, EvalInput(tool=names.TEST_KERNEL, problem=st.setup.problem, attempt=b.attempt,
                                             problem_source=spec.problem_source,
                                             source=b.source, settings=settings, output_cap=spec.tool_output_cap),
                result_type=EvalResult, **run.opts(f"test the best, attempt {b.attempt}, on the sweep shapes",
                                                   gpu=True))
        except ActivityError as err:  # e.g. a problem without a sweep set: the notebook says so, the run ends
            await run.notebook(f"sweep check of the best (attempt {b.attempt}) did not run: "
                               f"{short(str(err.cause or err), 200)}")
            return
        st.best_sweep = res.digest
        verdict = "correct on every sweep shape" if res.digest.status == "ok" else (
            f"{res.digest.status}: {short(res.digest.reason, 200)}")
        await run.notebook(f"sweep check of the best (attempt {b.attempt}): {verdict}")


class TaskTarget(KernelTarget):
    """A task (tasks/): a test suite's time, a bundle's size, a flaky test's failure rate. It starts as a
    kernel does (prepare, then the start measured against itself), states its own goal, and has no
    sweep to check its best on: every measurement already ran the task's own guard."""

    def _goal(self) -> Goal:
        st, spec = self.run.state, self.run.spec
        setup, task = st.setup, spec.task
        m = task.spec.metric
        better = "lower" if m.direction == "lower" else "higher"
        target = (f"make {m.read} {better} than the task's own files ({'while' if task.spec.guard else 'and'} "
                  f"{'its guard passes' if task.spec.guard else 'nothing breaks'})")
        if st.target_speedup:
            target += f"; the run stops at {st.target_speedup:g}x better"
        start_eval = st.attempts[0].evals[-1] if st.attempts and st.attempts[0].evals else None
        if start_eval is not None and start_eval.status == "ok":
            target += f"; the task's own files: {short(start_eval.reason, 200)}"
        return Goal(problem=setup.problem, statement=setup.statement, target=target,
                    baselines=[TASK_BASELINE], shapes="(a task: no shapes)", device="cpu", kind="task")

    async def check_best(self) -> None:
        return None
