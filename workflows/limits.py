"""The upper bounds of every number a run takes from outside (the workflow input, the updates, the
signals, the CLI's flags): one place, so a typo like `--hours 1e11` is refused at the door with a
line naming it, never turned into a timer that overflows on every retry. Pure: no imports, so the
light CLI commands read it too."""
from __future__ import annotations

MAX_HOURS = 720.0  # a month: a run's time budget, extensions included
MAX_TIMEOUT_S = 86_400.0  # a day: any one timeout (a candidate, a tool, a model request, a wait)
MAX_HEARTBEAT_S = 3_600.0
MAX_TOOL_CALLS = 1_000_000  # a run's tool-call budget, extensions included
MAX_SPEEDUP = 1e6
MAX_AGENTS = 64
MAX_PARALLEL = 64  # evaluations at once (GPU workers), or a suite's problems at once
MAX_SEEDS = 1_000
MAX_REPS = 100_000
MAX_ATTEMPTS = 100  # infrastructure retries of one evaluation
MAX_TOKENS = 10_000_000  # a context budget
MAX_REPLY_TOKENS = 1_000_000  # one model reply's max_tokens (a server generates up to it)
MAX_TEMPERATURE = 10.0
MAX_TURNS = 1_000_000  # turns between compactions or hops, idle turns
MAX_SOURCE_CHARS = 2_000_000  # a kernel's or a problem file's text (a Temporal payload is at most 2 MB)
MAX_HISTORY_BYTES = 50_000_000  # Temporal's own hard limit on one history
MAX_STATE_BYTES = 10_000_000
MAX_HINTS = 100  # hints a run keeps, its input's and the updates' together
MAX_HINT_CHARS = 8_000  # a hint lives in the history and in every later prompt
# all of a run's hints as JSON (its input's and the updates' together): they are carried across
# continue-as-new in up to four copies (the input, the state, those not yet shown, the memory)
MAX_HINTS_BYTES = 32_000
# the input and state a run carries across continue-as-new, as JSON: a Temporal payload past 2 MB fails
# every later workflow task (PAYLOADS_TOO_LARGE); past this the run ends instead
MAX_CARRY_BYTES = 1_500_000
MAX_REPORT_BYTES = 1_500_000  # a run's report (its result), for the same reason: RunReport.fitted
MAX_STOP_REASON_CHARS = 500
MAX_SHAPES = 256  # explicit shapes of one run
MAX_DIMENSION = 2**31  # one dimension of a shape
MAX_NAME_CHARS = 128  # a problem's, a kernel's, a task queue's name
MAX_SUITE_RUNS = 1_000
MAX_SIGNAL_BYTES = 1_000_000  # a signal's payload as JSON
MAX_INPUT_BYTES = 2_000_000  # a workflow's input as JSON (Temporal refuses a payload past 2 MB anyway)
