"""A rehearsal of compaction over a long run, with no model and no server: a scripted policy that
writes, edits, compiles, tests and profiles candidate kernels with realistic message sizes, the
workflow's compaction loop around it (triggers, prompt assembly, memory), and a summarizing "model"
that is forgetful and, on a schedule, answers garbage or fails. bench/compaction_profile.py sizes the
budget defaults with it; tests/compaction/test_compaction.py holds the memory to its promises with it.

It drives the library exactly as the workflow does (`needs_compaction` on `estimate_prompt`,
`compact_memory`, `tail_turns`, `build_messages` on `with_best`), records what every model call saw,
and leaves the asserting to its callers. Deterministic for a seed; no I/O."""
from __future__ import annotations

import hashlib
import json
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from compaction.memory import AttemptDigest, BestKernel, Goal, LiveFigures, Memory, empty_memory
from compaction.prompt import (build_messages, estimate_prompt, estimate_tokens, memory_block, needs_compaction,
                               strip_figures, tail_turns, with_best)
from compaction.summarize import clip_transcript

BASELINES = {"fla_chunk_kda": 1000.0, "torch_chunked": 2600.0}  # us at the bench shape
START_LATENCY = 2400.0
FIRST_FAILURE = "re-centre the gated cumulative decay at the chunk start instead of its middle"
IDEAS = [
    "fuse the decay cumsum into the preparation kernel",
    "chunk-parallel preparation plus a sequential scan across chunks",
    "keep the K x V state in registers across the chunk loop",
    "split V into two halves processed by separate programs",
    "use tl.dot for the intra-chunk attention with fp32 accumulation",
    "precompute the WY representation of the chunk's Householder products",
    "store exp(g) in bf16 to halve the decay traffic",
    "software-pipeline the loads of k and v with num_stages=3",
    "move beta scaling into the k load",
    "solve the unit lower-triangular system by forward substitution in shared memory",
    "invert (I + A) blockwise with 16x16 blocks",
    "swap the loop order over K and V tiles",
    "use a persistent kernel over (batch, head) pairs",
    "recompute the gated cumsum instead of loading it",
    "tile the chunk as 64 rows with BLOCK_K=64",
    "accumulate the output in fp32 and cast once at the end",
    "merge the output projection into the scan kernel",
    "use tl.associative_scan for the within-chunk decay",
    "vectorize the g loads with 128-bit accesses",
    "transpose k in shared memory before the state update",
]
CODE_LINES = [
    "    acc += tl.dot(q_tile, tl.trans(k_tile), out_dtype=tl.float32) * scale",
    "    g_cum = tl.cumsum(tl.load(g_ptr + offs_t[:, None] * stride_gt + offs_k[None, :], mask=mask_tk), axis=0)",
    "    state = state * tl.exp(g_last)[:, None] + tl.dot(tl.trans(k_dec), v_new.to(tl.bfloat16))",
    "    o = tl.dot(q_dec.to(tl.bfloat16), state.to(tl.bfloat16)) + tl.dot(attn, v_new)",
    "    mask_t = (t0 + offs_t) < T",
    "    tl.store(o_ptr + offs_t[:, None] * stride_ot + offs_v[None, :], o.to(o_ptr.dtype.element_ty), mask=mask_tv)",
    "    beta_t = tl.load(beta_ptr + (t0 + offs_t) * stride_bt, mask=mask_t, other=0.0)",
    "    for i in range(1, BLOCK_T):  # forward substitution",
]


def synthetic_statement(chars: int = 3200) -> str:
    text = ("Kimi Delta Attention forward. Entry point kda(q, k, v, g, beta, scale) -> o. q and k are [B, T, H, K], "
            "L2-normalised; v is [B, T, H, V]; g is [B, T, H, K] fp32 log-decay; beta is [B, T, H] in (0, 1). "
            "Per batch and head the state S in R^(KxV) starts at 0 and for t = 1..T: S <- Diag(exp(g_t)) S; "
            "S <- S + beta_t k_t (v_t - S^T k_t)^T; o_t = scale S^T q_t. Candidates must be correct for every "
            "valid shape (masking, tails) and implement the algorithm themselves in Triton. ")
    return (text * (chars // len(text) + 1))[:chars]


def kda_goal(statement: str | None = None) -> Goal:
    return Goal(problem="kda", statement=statement if statement is not None else synthetic_statement(),
                target="beat fla_chunk_kda at B=1,T=8192,H=32,K=V=128 on the H200; stop at 1.5x",
                baselines=list(BASELINES), shapes="bench: B=1,T=8192,H=32,K=128,V=128", device="cuda (H200)")


@dataclass
class ScriptConfig:
    tool_calls: int = 1000
    compact_every: int = 40
    context_budget: int = 48_000
    fraction: float = 0.7
    keep_turns: int = 4  # turns kept verbatim after a compaction
    bad_summary_every: int = 3  # every k-th summary request is answered with garbage or fails
    tool_output_cap: int = 6000  # as the workflow caps tool results in history
    hours: float = 24.0
    seed: int = 0


@dataclass
class CallRecord:
    call: int
    tool_calls: int
    prompt_tokens: int
    messages: int
    fixed_goal: str
    figures: str
    memory_best: BestKernel | None
    true_best: BestKernel | None


@dataclass
class CompactionRecord:
    index: int
    tool_calls: int
    turn: int
    trigger: str  # every | fraction
    used_model: bool
    fallback_reason: str | None
    tokens_before: int
    tokens_after: int
    memory: Memory
    true_best: BestKernel | None
    failures_before: list[tuple[int, str]]  # (attempt, approach) of every failure so far
    input_bytes: int = 0  # the activity's input and result as JSON: what lands in the workflow history
    result_bytes: int = 0


@dataclass
class ScriptedRun:
    config: ScriptConfig
    calls: list[CallRecord] = field(default_factory=list)
    compactions: list[CompactionRecord] = field(default_factory=list)
    failures: list[tuple[int, str]] = field(default_factory=list)
    tool_calls: int = 0
    memory: Memory | None = None
    best: BestKernel | None = None

    def profile(self) -> dict[str, Any]:
        sizes = [c.prompt_tokens for c in self.calls]
        ordered = sorted(sizes)
        return {
            "tool_calls": self.tool_calls,
            "model_calls": len(self.calls),
            "context_budget": self.config.context_budget,
            "compact_every": self.config.compact_every,
            "fraction": self.config.fraction,
            "prompt_tokens_max": max(sizes),
            "prompt_tokens_median": statistics.median(sizes),
            "prompt_tokens_p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "prompt_tokens_min": min(sizes),
            "compactions": len(self.compactions),
            "compactions_every_n": sum(1 for c in self.compactions if c.trigger == "every"),
            "compactions_fraction": sum(1 for c in self.compactions if c.trigger == "fraction"),
            "model_summaries": sum(1 for c in self.compactions if c.used_model),
            "fallbacks": sum(1 for c in self.compactions if not c.used_model),
            "fallback_reasons": sorted({(c.fallback_reason or "").split(":")[0] for c in self.compactions
                                        if not c.used_model}),
            "memory_tokens_max": max((c.tokens_after for c in self.compactions), default=0),
            "memory_tokens_median": statistics.median([c.tokens_after for c in self.compactions] or [0]),
            "compacted_tokens_median": statistics.median([c.tokens_before for c in self.compactions] or [0]),
            "activity_input_bytes_max": max((c.input_bytes for c in self.compactions), default=0),
            "activity_result_bytes_max": max((c.result_bytes for c in self.compactions), default=0),
            "failures": len(self.failures),
            "best_latency_us": self.best.latency_us if self.best else None,
            "best_speedups": self.best.speedups if self.best else None,
        }


class ForgetfulModel:
    """A summarizing model: valid summaries that mention only the latest window (it forgets earlier
    failures and claims a better 'best'), and every `bad_every`-th request a failure, in turn: prose,
    JSON of the wrong shape, an exception, a JSON list, truncated JSON."""

    BAD = ("prose", "wrong_schema", "exception", "list", "truncated")

    def __init__(self, bad_every: int) -> None:
        self.bad_every = bad_every
        self.requests = 0
        self.window: list[AttemptDigest] = []

    def __call__(self, settings: Any, messages: list[dict], tools: Any = None, response_format: Any = None) -> dict:
        self.requests += 1
        assert response_format is not None and response_format["type"] == "json_schema"
        assert messages[0]["role"] == "system" and "JSON" in messages[0]["content"]
        if self.bad_every and self.requests % self.bad_every == 0:
            kind = self.BAD[(self.requests // self.bad_every - 1) % len(self.BAD)]
            if kind == "exception":
                raise RuntimeError("model endpoint answered HTTP 500: upstream overloaded")
            text = {
                "prose": "Sure! Here is a summary: the kernel is getting faster and we should keep going.",
                "wrong_schema": json.dumps({"summary": "things went fine", "best": {"attempt": 1}}),
                "list": json.dumps([{"hypothesis": "x"}]),
                "truncated": '{"strategies": [{"hypothesis": "fuse', }[kind]
            return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
        strategies, failures = [], []
        for d in self.window:
            if d.status in ("compile_error", "incorrect"):
                failures.append({"approach": (d.note or "?") + " (as the model recalls it)",
                                 "why": d.summary[:120], "attempt": d.attempt})
            elif d.latency_us is not None:
                strategies.append({"hypothesis": d.note or "?", "change": "", "effect": f"{d.latency_us:.0f} us",
                                   "verdict": "tried", "attempt": d.attempt})
        body = {"strategies": strategies, "failures": failures,
                "insights": [f"window of {len(self.window)} evaluations: still memory-bound on the state loads"],
                "hypotheses": ["a larger BLOCK_T may amortize the state reload"],
                "next_plan": "profile the best kernel with ncu and attack the dominant stall",
                "goal": "make it 100x faster", "best": {"attempt": 999, "latency_us": 1.0}}
        return {"choices": [{"message": {"role": "assistant", "content": json.dumps(body)}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 200}}


def _source(rng: random.Random, n: int) -> str:
    lines = [f"# attempt {n}", "import triton", "import triton.language as tl", "", "@triton.jit",
             "def kda_fwd_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, T, scale, BLOCK_T: tl.constexpr):"]
    for _ in range(rng.randint(90, 220)):
        lines.append(rng.choice(CODE_LINES))
    return "\n".join(lines) + "\n"


def _pad(rng: random.Random, head: str, chars: int, filler: list[str]) -> str:
    out = [head]
    while sum(len(x) + 1 for x in out) < chars:
        out.append(rng.choice(filler))
    return "\n".join(out)


def run_scripted(cfg: ScriptConfig | None = None, goal: Goal | None = None, chat: Any = None,
                 system_prompt: str | None = None) -> ScriptedRun:
    from activities.compaction import CompactInput, compact_memory  # the activity's plain function
    from workflows.models import ModelSettings

    cfg = cfg or ScriptConfig()
    goal = goal or kda_goal()
    rng = random.Random(cfg.seed)
    model = ForgetfulModel(cfg.bad_summary_every)
    chat = chat or model
    settings = ModelSettings(model="scripted-summarizer", base_url="http://127.0.0.1:9/v1")
    run = ScriptedRun(config=cfg)

    memory: Memory = empty_memory(goal, hints=["the H200 has 50 MB of L2; keep the state resident"])
    hints = list(memory.hints)
    recent: list[dict] = [{"role": "user", "content": "Start from the starter kernel (attempt 0). Make it faster."}]
    window: list[AttemptDigest] = []
    best: BestKernel | None = None
    tool_calls = calls_since = turn = 0
    n_attempts = 0
    current: dict | None = None  # the candidate in flight: n, idea, outcome, stage, latency
    call_id = 0

    def record_failure(n: int, idea: str) -> None:
        run.failures.append((n, idea))

    def tool(name: str, args: dict, result: str) -> tuple[dict, dict]:
        nonlocal call_id
        call_id += 1
        cid = f"call_{call_id}"
        return ({"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}},
                {"role": "tool", "tool_call_id": cid, "content": result[: cfg.tool_output_cap]})

    def judged(step: dict, name: str, status: str, summary: str, out: str, passed_stage: str) -> None:
        """A compile or test call on the attempt in flight: failed, the attempt is done; else on it goes."""
        digests.append(AttemptDigest(attempt=step["n"], tool=name, status=status, summary=summary, note=step["idea"]))
        step["stage"] = passed_stage if status == "ok" else "done"
        if status != "ok":
            record_failure(step["n"], step["idea"])
        calls.append(tool(name, {}, out))

    while tool_calls < cfg.tool_calls:
        figures = LiveFigures(
            best_speedup=min(best.speedups.values()) if best else None,
            best_latency_us=best.latency_us if best else None, best_attempt=best.attempt if best else None,
            tool_calls_used=tool_calls, tool_calls_budget=cfg.tool_calls,
            hours_used=round(cfg.hours * tool_calls / cfg.tool_calls, 2), hours_budget=cfg.hours)

        # compaction, as the workflow does it before a model call
        est = estimate_prompt(goal, figures, memory, recent, system_prompt)
        if needs_compaction(calls_since, cfg.compact_every, est, cfg.context_budget, cfg.fraction):
            trigger = "every" if 0 < cfg.compact_every <= calls_since else "fraction"
            model.window = list(window)
            inp = CompactInput(memory=memory, transcript=clip_transcript(recent), attempts=window, best=best,
                               hints=hints, turn=turn, model=settings, tokens_before=est)
            input_bytes = len(inp.model_dump_json())
            res = compact_memory(inp, chat=chat)
            memory = Memory.model_validate_json(res.memory.model_dump_json())  # as it crosses Temporal
            run.compactions.append(CompactionRecord(
                index=len(run.compactions) + 1, tool_calls=tool_calls, turn=turn, trigger=trigger,
                used_model=res.used_model, fallback_reason=res.fallback_reason, tokens_before=res.tokens_before,
                tokens_after=res.tokens_after, memory=memory, true_best=best, failures_before=list(run.failures),
                input_bytes=input_bytes, result_bytes=len(res.model_dump_json())))
            recent = tail_turns(recent, cfg.keep_turns, max_tokens=cfg.context_budget // 8)
            window, calls_since = [], 0

        # the model call
        msgs = build_messages(goal, figures, with_best(memory, best), recent, cfg.context_budget, system_prompt)
        turn += 1
        sys_text = msgs[0]["content"]
        run.calls.append(CallRecord(call=turn, tool_calls=tool_calls, prompt_tokens=estimate_tokens(msgs),
                                    messages=len(msgs), fixed_goal=strip_figures(sys_text),
                                    figures=sys_text[len(strip_figures(sys_text)):],
                                    memory_best=with_best(memory, best).best, true_best=best))
        if turn % 97 == 0:
            hints.append(f"hint {turn // 97}: try BLOCK_T=64 with num_warps=8")

        # the scripted policy answers with tool calls; the workflow runs them
        calls: list[tuple[dict, dict]] = []
        digests: list[AttemptDigest] = []
        text = ""
        if current is None or current["stage"] == "done":
            n_attempts += 1
            n = n_attempts
            if n == 2:
                idea = FIRST_FAILURE
            else:
                idea = rng.choice(IDEAS)
                if rng.random() < 0.6:
                    idea += f" with BLOCK_T={rng.choice((16, 32, 64, 128))}, num_warps={rng.choice((2, 4, 8))}"
            r = rng.random()
            outcome = "incorrect" if n == 2 else ("compile_error" if r < 0.2 else "incorrect" if r < 0.38 else "ok")
            ref = best.latency_us if best else START_LATENCY
            current = {"n": n, "idea": idea, "outcome": outcome, "stage": "written",
                       "latency": round(max(ref * rng.uniform(0.9, 1.4), 560.0 + rng.uniform(0, 40)), 1)}
            text = _pad(rng, f"Hypothesis: {idea}. I expect fewer stalls on the state loads.", rng.randint(200, 1400),
                        ["The profile says the scan is bound by the K x V state traffic.",
                         "Keeping the chunk in shared memory should help occupancy."])
            if best is not None and rng.random() < 0.35:
                calls.append(tool("edit_kernel", {"old": "BLOCK_T = 32", "new": "BLOCK_T = 64"},
                                  f"attempt {n}: edited attempt {best.attempt} (1 replacement); 214 lines"))
            else:
                calls.append(tool("write_kernel", {"source": _source(rng, n)}, f"attempt {n}: written, 203 lines"))
            if rng.random() < 0.15:
                calls.append(tool("note", {"text": f"trying: {idea}"}, "noted"))
        else:
            n, stage = current["n"], current["stage"]
            text = rng.choice(["", "Compiling.", "Now the correctness test.", "Profiling against the baselines."])
            if stage == "written":
                if current["outcome"] == "compile_error":
                    judged(current, "compile_kernel", "compile_error", "CompilationError at 88:12: incompatible dot shapes",
                           _pad(rng, f"compile_error: attempt {n}\nTraceback (most recent call last):",
                                rng.randint(1200, 3500), ["  File \"candidate.py\", line 88, in kda_fwd_kernel",
                                                          "triton.compiler.errors.CompilationError: at 88:12:",
                                                          "    acc += tl.dot(a, b)  # incompatible shapes"]), "compiled")
                else:
                    judged(current, "compile_kernel", "ok", "compiled",
                           f"ok: attempt {n} compiled in 2.9 s; kernels: kda_fwd_kernel", "compiled")
            elif stage == "compiled":
                if current["outcome"] == "incorrect":
                    judged(current, "test_kernel", "incorrect", "rel_err 0.31 > 0.02 at T=8192",
                           _pad(rng, f"incorrect: attempt {n}: shape B=1,T=8192: rel_err 0.31 > 0.02",
                                rng.randint(500, 1800), ["  seed 1: max_abs_err 2.1e-1", "  seed 2: max_abs_err 1.9e-1"]),
                           "tested")
                else:
                    judged(current, "test_kernel", "ok", "correct on 4 shapes",
                           f"ok: attempt {n} correct on 4 shapes x 3 seeds (max rel_err 3.1e-3)", "tested")
            elif stage == "tested":
                lat = current["latency"]
                speedups = {k: round(v / lat, 3) for k, v in BASELINES.items()}
                roof = round(90.0 / lat * 100, 1)
                summary = f"{lat:.1f} us, {roof}% of roofline; ncu: dram {rng.randint(40, 90)}%, sm {rng.randint(20, 70)}%"
                out = _pad(rng, f"ok: attempt {n}: {summary}\n{json.dumps(speedups)}", rng.randint(2000, 5500),
                           ["  l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum 1.2e9",
                            "  smsp__warp_issue_stalled_long_scoreboard 41%",
                            "  sm__throughput.avg.pct_of_peak_sustained_elapsed 38%"])
                digests.append(AttemptDigest(attempt=n, tool="profile_kernel", status="ok", summary=summary,
                                             latency_us=lat, speedup=speedups, note=current["idea"]))
                if best is None or lat < best.latency_us:
                    best = BestKernel(attempt=n, source_sha256=hashlib.sha256(str(n).encode()).hexdigest(),
                                      latency_us=lat, speedups=speedups, summary=summary)
                current["stage"] = "done"
                calls.append(tool("profile_kernel", {}, out))
            if rng.random() < 0.08:
                calls.append(tool("list_attempts", {}, _pad(rng, "attempts (latest 40):", 4000,
                                                            [f"  #{i}: ok 1{i:03d} us" for i in range(40)])))
            elif rng.random() < 0.05 and best is not None:
                calls.append(tool("show_kernel", {"attempt": best.attempt}, _source(rng, best.attempt)))

        calls = calls[: cfg.tool_calls - tool_calls]
        recent.append({"role": "assistant", "content": text, "tool_calls": [c for c, _ in calls]})
        recent.extend(r for _, r in calls)
        tool_calls += len(calls)
        calls_since += len(calls)
        window.extend(digests)

    run.tool_calls = tool_calls
    run.memory = memory
    run.best = best
    return run


def mentions(memory: Memory | str, approach: str, chars: int = 40) -> bool:
    """Whether the memory, as a model reads it (`memory_block`, or that text), still names an
    approach (its first `chars` characters)."""
    text = memory if isinstance(memory, str) else memory_block(memory)
    return " ".join(approach.split())[:chars] in text
