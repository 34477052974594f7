"""A best kernel someone claims, checked against what the run itself evaluated. A signal can come from
anyone who can reach the server, so a claim's verdict and speedup are never believed: the run looks up
the ok profiles of the claimed source's SHA-256 that its own evaluations (the run's and its agents')
recorded worker-side (activities.evaluation.find_verdict), and takes that verdict's figures, source and
CONFIG, or nothing. Runs inside the workflow."""
from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows import names
    from workflows.models import AgentNews, RecordedVerdict, VerdictLookup

from workflows.run import Run, short


def run_ids(run: Run) -> list[str]:
    """The workflow ids whose evaluations count as this run's own: the run and its agents."""
    info = workflow.info()
    if run.spec.agent is not None and info.parent is not None:
        root, n = info.parent.workflow_id, run.spec.agent.of
    else:
        root, n = info.workflow_id, run.spec.agents
    return [root] + [names.agent_id(root, i) for i in range(1, n + 1)] if n > 1 else [root]


async def recorded_verdict(run: Run, sha256: str | None) -> RecordedVerdict | None:
    """The best ok profile of a source that this run's own evaluations recorded (FIND_VERDICT), or None."""
    st, spec = run.state, run.spec
    if sha256 is None or st.setup is None:
        return None
    try:
        found: RecordedVerdict = await workflow.execute_activity(
            names.FIND_VERDICT, VerdictLookup(workflow_ids=run_ids(run), problem=st.setup.problem, task_key=st.setup.task_key,
                                              problem_source=spec.problem_source, settings=spec.eval,
                                              source_sha256=sha256, inline_cap=spec.inline_source_cap),
            result_type=RecordedVerdict, **run.opts(f"look up the recorded verdict of {sha256[:12]}"))
    except ActivityError as err:
        await run.notebook(f"cannot look up the verdict of {sha256[:12]}: {short(str(err.cause or err), 200)}")
        return None
    return found if found.verdict is not None and found.digest is not None and found.source is not None else None


async def verified(run: Run, news: AgentNews) -> AgentNews | None:
    """A claimed best as this run's own evaluations recorded it (their verdict, speedup, source and
    CONFIG, none of the claim's), or None when they recorded no ok profile of its source."""
    found = await recorded_verdict(run, news.source.sha256 if news.source is not None else None)
    if found is None:
        await run.notebook(f"ignored a best claimed for agent {news.agent}: no evaluation of this run recorded "
                           f"an ok profile of its source")
        return None
    sp = f" at {found.digest.speedup:.3g}x" if found.digest.speedup is not None else ""
    return news.model_copy(update={"source": found.source, "verdict": found.verdict, "config": found.config,
                                   "speedup": found.digest.speedup,
                                   "line": f"new best{sp} (verdict recorded by {found.workflow_id})"})
