"""The protocol between the judge and the two processes it starts: the candidate's
(kernels/evaluator/candidate_process.py) and a file problem's (kernels/evaluator/problem_process.py).
These three modules import it, and it is the only code the judge and those processes share about
what they say to each other.

It imports pydantic and the standard library only (no torch, no Triton): the candidate's process
imports it before any candidate code and before the seal, and the judge reads the candidate's replies
with it without trusting them.

The wire: one JSON object per line. The judge writes to the process's stdin: first its assignment,
then requests (`op`). The process writes on its reply pipe: replies (`kind`) and, from the candidate's
process, the record of its calls (`kind` "rec", `what` ...) and the seal's lines (`kind` "seal" or
"sealed", written by kernels/evaluator/seal.py itself); every line carries the run's nonce, which the
judge checks before it reads anything else of the line. Every field is typed and bounded, and no
message takes a field it does not name: a reply that is not exactly one of these is refused
(`read_reply`), never half-read."""
from __future__ import annotations

import json
import secrets
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, JsonValue, RootModel, ValidationError, model_validator

# Bounds. Generous for any honest evaluation (MAX_CALLS: the timed calls of the largest run, all its
# phases), tight enough that no line can hold the judge's memory.
MAX_LINE_BYTES = 64 * 2**20  # one line on the reply pipe
MAX_CALLS = 1_000_000  # timed calls, kept outputs, call indices in one list
MAX_CALL_INDEX = 2**31
MAX_SEED = 2**62
MAX_BYTES = 2**50
MAX_SECONDS = 1e7
MAX_MICROS = 1e13
MAX_TEXT = 20_000  # an error's text (the processes send a traceback's last 6000 characters)
MAX_NAME = 10_000  # a module's, a kernel's, a thread's, a harness object's name
MAX_NAMES = 100_000  # names in one list (modules loaded, module-level names changed)
MAX_PATH = 4096
MAX_DIMS = 256  # entries of a shape
MAX_DIM = 2**62
MAX_SHAPES = 256  # shapes in one request

Nonce = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
Name = Annotated[str, Field(max_length=MAX_NAME)]
Names = Annotated[list[Name], Field(max_length=MAX_NAMES)]
FilePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH)]
ProblemName = Annotated[str, Field(min_length=1, max_length=255)]
EntryPoint = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
DtypeName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]  # a torch dtype's name: float32, bfloat16
Device = Literal["cpu", "cuda"]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
CallIndex = Annotated[int, Field(ge=0, le=MAX_CALL_INDEX)]
CallIndices = Annotated[list[CallIndex], Field(max_length=MAX_CALLS)]
Factor = Annotated[int, Field(ge=0, le=2**62)]  # a perturbation's or a digest's factor
Count = Annotated[int, Field(ge=0, le=MAX_CALLS)]
Bytes = Annotated[int, Field(ge=0, le=MAX_BYTES)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Micros = Annotated[float, Field(ge=0, le=MAX_MICROS, allow_inf_nan=False)]
MicrosList = Annotated[list[Micros], Field(max_length=MAX_CALLS)]
Dim = Annotated[int, Field(ge=-MAX_DIM, le=MAX_DIM)]  # a problem's constant may be negative (dim=-1)
Shape = Annotated[dict[Annotated[str, Field(min_length=1, max_length=128)], Dim], Field(max_length=MAX_DIMS)]
OutputShape = Annotated[list[Annotated[int, Field(ge=0, le=MAX_DIM)]], Field(max_length=64)]
FenceFacts = Annotated[dict[Annotated[str, Field(max_length=64)], Union[bool, int, float, Name]],
                       Field(max_length=64)]


class Message(BaseModel):
    # NaN and inf written as JSON's usual extensions (a NaN digest stays NaN, as json.dumps writes it)
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")


# --- assignments: the first line on a process's stdin ---------------------------------------------

class FencedAssignment(Message):
    """What both processes are told about their fences (kernels/evaluator/fences.py)."""
    nonce: Nonce
    device: Device
    seccomp: bool = True
    landlock: bool = True
    landlock_reads: bool = True
    landlock_exec: bool = True
    netns: bool = True
    drop_capabilities: bool = True
    writable: Annotated[str, Field(max_length=64 * MAX_PATH)] = ""  # paths joined by os.pathsep
    readable: Annotated[str, Field(max_length=64 * MAX_PATH)] = ""
    toolchain: Literal["none", "triton", "torch-compile"] = "none"  # the programs it may start


class CandidateAssignment(FencedAssignment):
    candidate: FilePath  # the candidate's source file
    entry: EntryPoint
    problem_file: FilePath | None = None  # a file problem's source, for the candidate's ModelNew
    problem_name: ProblemName | None = None
    param_seed: Seed = 0
    gpu_memory_fraction: Annotated[float, Field(ge=0, le=1)] = 0.0  # 0: no cap
    fsize: Annotated[int, Field(ge=1, le=MAX_BYTES)] | None = None  # RLIMIT_FSIZE
    seal: Literal["on", "off", "report"] = "on"

    @model_validator(mode="after")
    def _file_problem_whole(self) -> CandidateAssignment:
        if (self.problem_file is None) != (self.problem_name is None):
            raise ValueError("a file problem's file and name come together")
        return self


class ProblemAssignment(FencedAssignment):
    problem_file: FilePath
    problem_name: ProblemName
    param_seed: Seed = 0
    toolchain: Literal["none", "triton", "torch-compile"] = "torch-compile"
    fsize: Annotated[int, Field(ge=1, le=MAX_BYTES)] | None = None  # RLIMIT_FSIZE, as the candidate's


# --- requests: the judge's commands, a line each ----------------------------------------------------

class ExitRequest(Message):
    op: Literal["exit"] = "exit"


class CallRequest(Message):
    """One call of the candidate on the inputs of `seed`, its output saved at `output`."""
    op: Literal["call"] = "call"
    problem: ProblemName
    seed: Seed
    output: FilePath
    shape: OutputShape  # the output's expected shape
    dtype: DtypeName  # and dtype
    noop: bool = False  # the candidate's own kernels not launched
    fill: Annotated[int, Field(ge=0, le=255)] = 0xFF  # the poison byte of fresh memory
    problem_shape: Shape
    index: CallIndex = 0
    input_dtype: DtypeName
    widen: bool = False  # a file problem's inputs of one sign widened to both (FileReference.widen)


class TimeRequest(Message):
    op: Literal["time"] = "time"
    problem: ProblemName
    shape: Shape
    dtype: DtypeName
    seed_base: Seed
    slots: Annotated[int, Field(ge=1, le=64)] = 2
    reps: Annotated[int, Field(ge=1, le=MAX_CALLS)]
    warmup: Annotated[int, Field(ge=0, le=MAX_CALLS)]
    sync_reps: Annotated[int, Field(ge=0, le=MAX_CALLS)] = 0
    graph: bool = True
    keep_bytes: Bytes | None = None  # None: every output kept


class SaveTimedRequest(Message):
    op: Literal["save_timed"] = "save_timed"
    indices: CallIndices
    dir: FilePath
    clear: bool = True


class ArmRequest(Message):
    op: Literal["arm"] = "arm"
    problem: ProblemName
    shape: Shape
    dtype: DtypeName
    capture_seeds: Annotated[list[Seed], Field(max_length=4096)]
    seeds: Annotated[list[Seed], Field(max_length=4096)]
    index: CallIndex
    a: Factor
    b: Factor
    graph: bool = True


class FireRequest(Message):
    op: Literal["fire"] = "fire"
    pa: Factor
    pb: Factor
    da: Factor
    db: Factor


class PingRequest(Message):
    op: Literal["ping"] = "ping"


class ForgetRequest(Message):
    op: Literal["forget"] = "forget"


CandidateRequest = Annotated[Union[CallRequest, TimeRequest, SaveTimedRequest, ArmRequest, FireRequest, PingRequest,
                                   ForgetRequest, ExitRequest], Field(discriminator="op")]


class SpecRequest(Message):
    op: Literal["spec"] = "spec"
    shape: Shape
    dtype: DtypeName


class MinBytesRequest(Message):
    op: Literal["min_bytes"] = "min_bytes"
    shape: Shape
    elem: Annotated[int, Field(ge=1, le=64)]


class ReferenceRequest(Message):
    op: Literal["reference"] = "reference"
    shape: Shape
    seed: Seed
    dtype: DtypeName
    perturb: tuple[Factor, Factor] | None = None
    widen: bool = False  # the inputs of one sign widened to both first (none: no reference is made)
    output: FilePath


class BaselineNamesRequest(Message):
    op: Literal["baseline_names"] = "baseline_names"


class BaselinesRequest(Message):
    op: Literal["baselines"] = "baselines"
    shape: Shape
    seeds: Annotated[list[Seed], Field(max_length=1000)]
    dtype: DtypeName
    names: Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=256)]
    reps: Annotated[int, Field(ge=1, le=MAX_CALLS)]
    warmup: Annotated[int, Field(ge=0, le=MAX_CALLS)]
    sync_reps: Annotated[int, Field(ge=0, le=MAX_CALLS)]
    limit_rel: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]


class FactsRequest(Message):
    op: Literal["facts"] = "facts"
    small: bool = False  # small sizes for a CPU too


class RunsRequest(Message):
    op: Literal["runs"] = "runs"
    shapes: Annotated[list[Shape], Field(max_length=MAX_SHAPES)]
    dtype: DtypeName = "float32"


ProblemRequest = Annotated[Union[SpecRequest, MinBytesRequest, ReferenceRequest, BaselineNamesRequest,
                                 BaselinesRequest, FactsRequest, RunsRequest, ExitRequest], Field(discriminator="op")]


# --- replies, and the record lines and seal lines among them ---------------------------------------

class FencedReply(Message):
    """The fences that went up (before any candidate or problem code ran)."""
    kind: Literal["fenced"] = "fenced"
    fences: FenceFacts


class ErrorReply(Message):
    """The process's own failure, or (from the candidate's process) the candidate's exception."""
    kind: Literal["error"] = "error"
    error: Text
    compile: bool = False  # the candidate failed to import or compile
    fatal: bool = False  # nothing more can run in the process (a CUDA fault)


class CandidateReadyReply(Message):
    kind: Literal["ready"] = "ready"
    import_s: Seconds
    new_modules: Names  # loaded by importing the candidate
    banned_modules: Names  # of those, the ones the policy bans
    fences: FenceFacts
    threads: Count
    unchecked_source: Names = []  # Triton functions whose source as Triton reads it is not the checked source


class CallFacts(Message):
    """What the harness saw of a call (or of the timed calls), for the judge to decide on."""
    new_modules: Names
    output_problem: Text | None
    threads_alive: Names
    state_changed: Names
    tampered: Names  # harness objects changed since the seal
    unchecked_source: Names = []  # as CandidateReadyReply's, found since (a kernel built during a call)


class CalledReply(CallFacts):
    kind: Literal["called"] = "called"
    seconds: Seconds
    inputs_mutated: Annotated[list[Count], Field(max_length=4096)]  # positions of the inputs changed


class TimingFigures(Message):
    """A timing run's raw figures (kernels/evaluator/timing.py time_fn): the times, and which call
    indices each phase made."""
    times_us: MicrosList
    graph_times_us: MicrosList | None = None
    graph_error: Text | None = None
    phases: dict[Literal["warmup", "timed", "sync", "graph"], CallIndices]
    wall_s: Seconds | None = None
    sync_wall_us: MicrosList = []


class TimedReply(TimingFigures):
    kind: Literal["timed"] = "timed"
    seeds: Annotated[dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], Seed], Field(max_length=MAX_CALLS)]
    facts: CallFacts
    kept: CallIndices  # the calls whose outputs are kept for the re-check


class SavedReply(Message):
    kind: Literal["saved"] = "saved"
    files: Annotated[dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], FilePath], Field(max_length=MAX_CALLS)]
    tampered: Names


class ArmedReply(Message):
    kind: Literal["armed"] = "armed"
    graph: bool  # the batch was captured in a CUDA graph
    graph_error: Text | None


class FiredReply(Message):
    kind: Literal["fired"] = "fired"
    digest: float | None  # NaN when an output holds one: the outputs' own check says so first
    output_problem: Text | None


class PongReply(Message):
    kind: Literal["pong"] = "pong"


class ForgotReply(Message):
    kind: Literal["forgot"] = "forgot"


class Record(Message):
    """A line of the record the candidate's process writes as things happen (not a reply)."""


class BeginRecord(Record):
    kind: Literal["rec"] = "rec"
    what: Literal["begin"] = "begin"
    call: CallIndex


class EndRecord(Record):
    kind: Literal["rec"] = "rec"
    what: Literal["end"] = "end"
    call: CallIndex
    problems: Annotated[list[Name], Field(max_length=64)]  # what the call left altered


# Keywords a launch may take besides the kernel's own parameters: the launch settings (how many warps,
# stages, CTAs and registers; a programmatic dependent launch or a cooperative grid on NVIDIA GPUs, which
# the tuned kernels use). Any other keyword is one of Triton's compile options, some of which reach past
# the kernel's source (ir_override and extern_libs load files by path in place of or beside its code,
# ptx_options is ptxas's command line), whether passed at the launch or in a triton.Config's dict (the
# autotuner passes those as keywords).
LAUNCH_OPTIONS = frozenset({"grid", "warmup", "num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl",
                            "launch_cooperative_grid"})


class LaunchRecord(Record):
    kind: Literal["rec"] = "rec"
    what: Literal["launch"] = "launch"
    name: Name  # module.qualname of the kernel
    own: bool  # defined in the candidate's module
    side: bool  # launched on a stream other than the call's
    odd: Annotated[list[Name], Field(max_length=4096)]  # arguments of types a launch may not take
    options: Annotated[list[Name], Field(max_length=4096)] = []  # keywords neither parameters nor LAUNCH_OPTIONS


class OpRecord(Record):
    kind: Literal["rec"] = "rec"
    what: Literal["op"] = "op"
    name: Name  # aten.NAME


class ProbeRecord(Record):
    kind: Literal["rec"] = "rec"
    what: Literal["probe"] = "probe"


class ThreadRecord(Record):
    kind: Literal["rec"] = "rec"
    what: Literal["thread"] = "thread"


class SuspendRecord(Record):
    """Torch popped a mode off its dispatch stack: code that runs with the torch-op monitor off (printing a
    tensor reads its values that way). Within a call, only the harness's own pop after the probe is honest."""
    kind: Literal["rec"] = "rec"
    what: Literal["suspend"] = "suspend"


class SealRecord(Record):
    """What the seal would have ended the process for (MARATHON_SANDBOX_SEAL=report); written by the seal."""
    kind: Literal["seal"] = "seal"
    event: Name
    why: Name


class SealedReply(Message):
    """The seal ended the process; written by the seal just before it exits."""
    kind: Literal["sealed"] = "sealed"
    event: Name
    why: Name


CallRecordLine = Annotated[Union[BeginRecord, EndRecord, LaunchRecord, OpRecord, ProbeRecord, ThreadRecord,
                                 SuspendRecord],
                           Field(discriminator="what")]
CandidateReply = Annotated[Union[CallRecordLine, SealRecord, SealedReply, FencedReply, CandidateReadyReply, ErrorReply,
                                 CalledReply, TimedReply, SavedReply, ArmedReply, FiredReply, PongReply, ForgotReply],
                           Field(discriminator="kind")]


class ProblemReadyReply(Message):
    kind: Literal["ready"] = "ready"


class ProblemErrorReply(Message):
    """The problem file's own failure, in one line with the file's line."""
    kind: Literal["problem_error"] = "problem_error"
    error: Text
    line: Annotated[int, Field(ge=0, le=10**9)] | None
    detail: Text


class SpecReply(Message):
    kind: Literal["spec"] = "spec"
    shape: OutputShape
    dtype: DtypeName
    input_bytes: Bytes
    perturbed_numel: Bytes = 0  # the input the judge's clock perturbs: its elements and dtype
    perturbed_dtype: DtypeName | None = None


class MinBytesReply(Message):
    kind: Literal["min_bytes"] = "min_bytes"
    bytes: Annotated[float, Field(ge=0, le=2.0**64, allow_inf_nan=False)]


class ReferencedReply(Message):
    kind: Literal["referenced"] = "referenced"
    inputs_s: Seconds
    reference_s: Seconds
    widened: Annotated[list[Name], Field(max_length=MAX_NAMES)] = []  # the inputs widened, when asked


class BaselineNamesReply(Message):
    kind: Literal["baseline_names"] = "baseline_names"
    names: Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=256)]


class BaselineTimed(Message):
    kind: Literal["timed"] = "timed"
    timing: TimingFigures


class BaselineDisagrees(Message):
    kind: Literal["disagrees"] = "disagrees"
    rel: float  # its error against the reference (inf or NaN where it broke)


class BaselineFailed(Message):
    kind: Literal["failed"] = "failed"
    error: Text


BaselineOutcome = Annotated[Union[BaselineTimed, BaselineDisagrees, BaselineFailed], Field(discriminator="kind")]


class BaselinesReply(Message):
    kind: Literal["baselines"] = "baselines"
    results: Annotated[dict[Annotated[str, Field(max_length=255)], BaselineOutcome], Field(max_length=256)]


class FactsReply(Message):
    """The file's facts; the judge reads them as kernels.problems.kernelbench.FileFacts."""
    kind: Literal["facts"] = "facts"
    facts: dict[Annotated[str, Field(max_length=128)], JsonValue]


class RunsReply(Message):
    """The reference once per shape; the judge reads each as kernels.problems.kernelbench.ReferenceCall."""
    kind: Literal["runs"] = "runs"
    calls: Annotated[list[dict[Annotated[str, Field(max_length=128)], JsonValue]], Field(max_length=MAX_SHAPES)]


ProblemReply = Annotated[Union[FencedReply, ProblemReadyReply, ErrorReply, ProblemErrorReply, SpecReply, MinBytesReply,
                               ReferencedReply, BaselineNamesReply, BaselinesReply, FactsReply, RunsReply],
                         Field(discriminator="kind")]



# The unions as classes (not TypeAdapters): their validators are class attributes, which the seal's
# integrity check covers in the candidate's process (kernels/evaluator/seal.py harness_objects).
class CandidateRequests(RootModel[CandidateRequest]):
    pass


class ProblemRequests(RootModel[ProblemRequest]):
    pass


class CandidateReplies(RootModel[CandidateReply]):
    pass


class ProblemReplies(RootModel[ProblemReply]):
    pass


class BaselineOutcomes(RootModel[BaselineOutcome]):
    pass


# --- framing ----------------------------------------------------------------------------------------

def encode_request(message: Message) -> bytes:
    """An assignment or a request, as its line on the process's stdin."""
    return (message.model_dump_json() + "\n").encode()


def read_request(line: str | bytes, model: type[BaseModel]):
    """The assignment (model: one of the assignments) or the request (model: CandidateRequests or
    ProblemRequests) on one line of stdin. Raises ValidationError."""
    parsed = model.model_validate_json(line, strict=True)
    return parsed.root if isinstance(parsed, RootModel) else parsed


def encode_reply(message: Message, nonce: str) -> bytes:
    """A reply or record line as the process writes it on its reply pipe: the message's fields and the
    run's nonce, last. (Every reply names its kind, so the object is never empty.)"""
    return (message.model_dump_json()[:-1] + ',"nonce":' + json.dumps(nonce) + "}\n").encode()


class Refused(Exception):
    """A reply line the judge does not accept. `why`: "garbage" (no JSON object with a kind),
    "forged" (not this run's nonce) or "malformed" (not exactly one of the messages)."""

    def __init__(self, why: Literal["garbage", "forged", "malformed"], detail: str = "") -> None:
        super().__init__(f"{why}: {detail}" if detail else why)
        self.why, self.detail = why, detail


def read_reply(line: bytes, nonce: str, replies: type[CandidateReplies] | type[ProblemReplies]):
    """One line of the reply pipe, checked in this order: a JSON object with a kind, this run's nonce,
    then every field of the message it names (strictly: no coercion, no field it does not name, every
    bound). Raises Refused; nothing of a refused line is returned."""
    if len(line) > MAX_LINE_BYTES:
        raise Refused("garbage", f"a line of {len(line)} bytes")
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        raise Refused("garbage") from None
    if not isinstance(raw, dict) or "kind" not in raw:
        raise Refused("garbage")
    sent = raw.pop("nonce", None)
    if not isinstance(sent, str) or not secrets.compare_digest(sent.encode("utf-8", "surrogatepass"), nonce.encode()):
        raise Refused("forged")
    try:
        return replies.model_validate(raw, strict=True).root
    except ValidationError as exc:
        raise Refused("malformed", f"{raw.get('kind')!r:.40}: {first_error(exc)}") from None


def first_error(exc: ValidationError) -> str:
    """A validation error in one line: where, and what (never the input, which may be anything)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return "invalid"
    where = ".".join(map(str, errors[0]["loc"])) or "the message"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {errors[0]['msg']}{more}"[:300]
