"""The seal: what the candidate's process may still do once candidate code is in it, enforced by a
Python audit hook (PEP 578), which nothing in the process can remove once it is added.

The static policy (policy.py) and the OS fences (isolation.py) come first; the seal is the layer for
a candidate that got past the policy with full Python (a hole in the policy, a dunder read). It is
installed right before the candidate module (and any problem code) is imported. Every audited action
an escape needs ends the process at once: a line naming the event on the reply channel, then
`os._exit(SEAL_EXIT)`, which the judge turns into a rejection. Sealed:

- processes (os.system, exec, fork, posix_spawn, subprocess), except Triton's compiler tools run by Triton;
- the network (every socket event, urllib, http and the other protocol clients);
- native code and raw memory (every ctypes event), and walks of the garbage collector;
- frames and code: sys._getframe and restricted attribute reads (f_code, tb_frame, gi_frame, __code__)
  by candidate code, compile/exec/eval, building code or functions, marshal, tracing and profiling
  hooks, another audit hook;
- files: any file operation asked for by candidate code; torch, Triton or the harness touching files
  outside the interpreter, the project's kernels, the scratch folder and Triton's cache;
- imports, by candidate code, of modules outside torch, Triton and a few pure standard modules.

Who asked is read from the call stack, by each frame's code file (`co_filename`): candidate code
cannot make code under another name without an audited event (compile, exec, code.__new__,
function.__new__, marshal), so the name is not forgeable. The candidate's file, problem code and any
file not under the interpreter, torch, Triton or the harness count as untrusted; standard-library
frames (and torch's, for the actions it takes on a caller's behalf) are looked through to whoever
called them. No flag decides anything, and the hook shares no mutable state with code a candidate
can reach; what it needs it holds in its own closure."""
from __future__ import annotations

import json
import os
import pathlib
import site
import sys
import sysconfig
import threading
import types
from pathlib import Path

SEAL_EXIT = 87  # the candidate process's exit status when the seal ended it

UNTRUSTED, TRITON, TORCH, HARNESS, STDLIB, LIBRARY = "candidate", "triton", "torch", "harness", "stdlib", "library"
ACTOR_WORDS = {UNTRUSTED: "candidate code", TRITON: "Triton", TORCH: "torch", HARNESS: "the harness",
               LIBRARY: "a library", None: "code with no caller on the stack (a thread or a callback)"}
# A file problem's code runs in the candidate's process too (its ModelNew is built with Model's
# constructor arguments), compiled under this name (kernels/problems/kernelbench_runtime.py). It is as
# untrusted as the candidate's, and the seal treats it alike; only the words differ, so that a reader
# (a user, the agent) sees whose code it was. The verdict stays a rejection: a candidate that patches
# what problem code calls could otherwise have its own act blamed on the problem and end the run.
PROBLEM_CODE_PREFIX = "<problem "
PROBLEM_WORDS = "the problem file's code"

# Modules candidate code may import for the first time after the seal (their root names); torch and
# Triton import what they need under their own names.
CANDIDATE_IMPORT_ROOTS = frozenset({
    "torch", "triton", "math", "functools", "itertools", "operator", "typing", "dataclasses", "collections",
    "enum", "numbers", "abc", "__future__", "fractions", "statistics",
})
# Standard modules that generate code (exec), read their caller's frame (sys._getframe) or a function's
# signature (__code__) for their own bookkeeping when candidate code uses them (a dataclass, a
# namedtuple, a TypeVar, an Enum); what they read stays inside them.
CODEGEN_STDLIB = ("dataclasses.py", "collections/__init__.py", "typing.py", "enum.py")
# Programs Triton runs while it compiles for a GPU.
COMPILER_TOOLS = frozenset({"ptxas", "cuobjdump", "nvdisasm", "nvlink", "fatbinary", "gcc", "cc", "g++", "c++",
                            "clang", "clang++", "ld", "ldconfig"})

# Triton's frames through which it compiles (and caches, and runs its compiler tools): (file suffix, function).
COMPILE_ENTRIES = (("triton/runtime/jit.py", "run"), ("triton/runtime/jit.py", "_do_compile"),
                   ("triton/runtime/jit.py", "warmup"), ("triton/compiler/compiler.py", "compile"),
                   ("triton/runtime/autotuner.py", "run"), ("triton/runtime/interpreter.py", "run"))
# event -> group; the groups' rules are in install()
_EVENTS = {
    "sys.addaudithook": "hooks", "sys.settrace": "hooks", "sys.setprofile": "hooks",
    "sys._setprofileallthreads": "hooks", "sys._settraceallthreads": "hooks", "sys.monitoring.register_callback": "hooks",
    "sys._current_frames": "hooks", "sys._current_exceptions": "hooks", "builtins.breakpoint": "hooks",
    "builtins.input": "hooks", "pdb.Pdb": "hooks",
    "sys._getframe": "frames", "sys._getframemodulename": "frames", "object.__getattr__": "frames",
    "compile": "code", "exec": "code", "code.__new__": "code", "function.__new__": "code", "marshal.load": "code",
    "marshal.loads": "code", "marshal.dumps": "code", "object.__setattr__": "code", "object.__delattr__": "code",
    "cpython.run_command": "code", "cpython.run_file": "code", "cpython.run_module": "code",
    "cpython.run_stdin": "code", "cpython.run_startup": "code", "cpython.run_interactivehook": "code",
    "import": "import",
    "subprocess.Popen": "spawn", "os.posix_spawn": "spawn",
    "os.system": "process", "os.exec": "process", "os.fork": "process", "os.forkpty": "process", "pty.spawn": "process",
    "os.kill": "process", "os.killpg": "process", "signal.pthread_kill": "process", "os.startfile": "process",
    "gc.get_objects": "memory", "gc.get_referrers": "memory", "gc.get_referents": "memory",
    "open": "read_or_write", "os.listdir": "read", "os.scandir": "read", "os.walk": "read", "os.fwalk": "read",
    "glob.glob": "read", "glob.glob/2": "read", "pathlib.Path.glob": "read", "pathlib.Path.rglob": "read",
    "os.listxattr": "read", "os.getxattr": "read",
    "os.remove": "write", "os.rename": "write", "os.rmdir": "write", "os.mkdir": "write", "os.chmod": "write",
    "os.chown": "write", "os.link": "write", "os.symlink": "write", "os.truncate": "write", "os.utime": "write",
    "os.setxattr": "write", "os.removexattr": "write", "tempfile.mkstemp": "write", "tempfile.mkdtemp": "write",
    "os.chdir": "write", "os.lockf": "write", "mmap.__new__": "write", "pickle.find_class": "write",
    "os.putenv": "env", "os.unsetenv": "env", "resource.setrlimit": "process", "resource.prlimit": "process",
    "webbrowser.open": "network", "urllib.Request": "network", "ensurepip.bootstrap": "process",
}
_PREFIXES = (("socket.", "network"), ("http.client.", "network"), ("ftplib.", "network"), ("smtplib.", "network"),
             ("imaplib.", "network"), ("nntplib.", "network"), ("poplib.", "network"), ("telnetlib.", "network"),
             ("ctypes.", "native"), ("shutil.", "write"), ("fcntl.", "write"), ("sqlite3.", "write"),
             ("syslog.", "process"), ("_winapi.", "process"), ("winreg.", "process"), ("msvcrt.", "process"))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _with_slash(path: str) -> str:
    return path if path.endswith("/") else path + "/"


def _roots(*paths) -> tuple[str, ...]:
    """Each path and its resolved form, as prefixes ending in '/'."""
    out = []
    for p in paths:
        if p:
            for q in (str(p), os.path.realpath(str(p))):
                out.append(_with_slash(os.path.normpath(q)))
    return tuple(dict.fromkeys(out))


def code_roots() -> dict[str, tuple[str, ...]]:
    """Where each kind of code on disk lives (category -> path prefixes ending in '/')."""
    import torch
    import triton
    paths = sysconfig.get_paths()
    sites = list(site.getsitepackages()) + [paths.get("purelib"), paths.get("platlib")]
    return {
        TRITON: _roots(os.path.dirname(triton.__file__)),
        TORCH: _roots(os.path.dirname(torch.__file__)),
        HARNESS: _roots(Path(__file__).resolve().parents[1]),  # kernels/: the harness and the problems' references
        LIBRARY: _roots(*sites),
        STDLIB: _roots(paths.get("stdlib"), paths.get("platstdlib"), os.path.dirname(os.__file__)),
    }


def make_classifier(untrusted_files: frozenset[str]):
    """file_category(co_filename) -> category. Longest prefixes first: site-packages lies under the
    venv's platstdlib, torch and Triton under site-packages."""
    roots = code_roots()
    table = sorted(((prefix, cat) for cat, prefixes in roots.items() for prefix in prefixes),
                   key=lambda pc: -len(pc[0]))
    table = tuple(table)
    cache: dict[str, str] = {}

    def file_category(filename, _str=str, _type=type, _table=table, _cache=cache, _untrusted=untrusted_files):
        if _type(filename) is not _str:
            return UNTRUSTED
        cat = _cache.get(filename)
        if cat is not None:
            return cat
        if filename in _untrusted:
            cat = UNTRUSTED
        elif filename.startswith("<frozen "):
            cat = STDLIB
        elif filename.startswith("<"):
            cat = UNTRUSTED  # code compiled from a string: a problem file, a generated function
        else:
            cat = UNTRUSTED
            for prefix, category in _table:
                if filename.startswith(prefix):
                    cat = category
                    break
        _cache[filename] = cat
        return cat

    return file_category


MODES = ("on", "report", "off")
# Frequent events no rule looks at: returned from before anything else.
_IGNORED = frozenset({"builtins.id", "array.__new__", "sys.excepthook", "sys.unraisablehook",
                      "sys.set_asyncgen_hook_firstiter", "sys.set_asyncgen_hook_finalizer", "time.sleep"})


class Seal(types.SimpleNamespace):
    """What install() hands the harness: `stack_owner(frame, bench)`, `check_import(name)`, and
    `verdict(event, args, frame)` (the rule for an event, applied to nothing: for tests)."""


def install(*, candidate_file: str, scratch: str, workdir: str, triton_cache: str, channel_fd: int, nonce: str,
            mode: str = "on") -> Seal:
    """Adds the audit hook (mode "on"), or only reports what it would end (mode "report": each such
    event is written to the channel as a `seal` record and allowed, for measuring what honest runs do),
    or adds nothing ("off": the fences alone are under test). In every mode the result's
    `stack_owner(frame, bench)` tells the torch-op monitor who is innermost on the stack, and
    `check_import(name)` vets an import statement of candidate code (see candidate_builtins)."""
    if mode not in MODES:
        raise ValueError(f"seal mode {mode!r}: one of {MODES}")
    file_category = make_classifier(frozenset({candidate_file}))
    python_roots = _roots(sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"),
                          *site.getsitepackages(), sys.prefix, sys.base_prefix, sys.exec_prefix)
    kernels_root = _roots(Path(__file__).resolve().parents[1])
    read_roots = python_roots + kernels_root + _roots(scratch, workdir, triton_cache) + ("/dev/null", "/dev/urandom")
    harness_write = _roots(workdir) + ("/dev/null",)
    triton_write = _roots(workdir, triton_cache) + ("/dev/null", "/dev/shm/")
    cwd = _with_slash(os.path.realpath(workdir))
    busy: set[int] = set()
    compile_entries = COMPILE_ENTRIES
    events = dict(_EVENTS)
    prefixes = _PREFIXES
    write = os.write
    exit_now = os._exit
    dumps = json.dumps
    getframe = sys._getframe
    get_ident = threading.get_ident
    frame_type = types.FrameType
    _str, _bytes, _int, _type, _len, _tuple = str, bytes, int, type, len, tuple
    basename = os.path.basename
    path_types = (pathlib.PosixPath, pathlib.PurePosixPath)
    path_str = pathlib.PurePath.__str__

    def actors(frame):
        """Who asked, from the innermost frame out: `loose`, the first caller that is not the standard
        library; `strict`, the first that is candidate, Triton or harness code (torch and other libraries
        looked through: they act on their caller's behalf); whether the import machinery stands between
        (an import in progress, which reads and compiles module files); whether Triton's frames there
        include one of its compile entry points; whether a standard module that generates code for its
        caller (a dataclass, a namedtuple) stands between."""
        loose = strict = culprit = None
        importing = compiling = codegen = False
        depth = 0
        while frame is not None and depth < 400:
            if _type(frame) is not frame_type:
                return UNTRUSTED, UNTRUSTED, False, False, False, None
            code = frame.f_code
            filename = code.co_filename
            cat = file_category(filename)
            if cat is UNTRUSTED and culprit is None:
                culprit = filename
            if cat is STDLIB:
                if strict is None and filename.startswith("<frozen importlib."):
                    importing = True
                if loose is None and filename.endswith(CODEGEN_STDLIB):
                    codegen = True
            else:
                if loose is None:
                    loose = cat
                if cat is TRITON:
                    if not compiling:
                        for suffix, name in compile_entries:
                            if code.co_name == name and filename.endswith(suffix):
                                compiling = True
                                break
                    if strict is None:
                        strict = TRITON
                elif cat is UNTRUSTED or cat is HARNESS:
                    if strict is None:
                        strict = cat
                    break
            frame = frame.f_back
            depth += 1
        return loose, strict, importing, compiling, codegen, culprit

    def words(cat, culprit):
        if cat is UNTRUSTED and _type(culprit) is _str and culprit.startswith(PROBLEM_CODE_PREFIX):
            return PROBLEM_WORDS
        return ACTOR_WORDS[cat]

    def normalise(path):
        if _type(path) in path_types:
            path = path_str(path)  # Triton names its cache files with pathlib paths
        if _type(path) is _bytes:
            path = path.decode("utf-8", "surrogateescape")
        if _type(path) is not _str or "\x00" in path:
            return None
        if not path.startswith("/"):
            path = cwd + path
        parts = []
        for part in path.split("/"):
            if part == "" or part == ".":
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(part)
        return "/" + "/".join(parts)

    def inside(path, roots):
        if path is None:
            return False
        probe = path + "/"
        for root in roots:
            if probe.startswith(root) or path == root:
                return True
        return False

    def file_rule(group, event, args, strict, importing, compiling, culprit):
        target = args[0] if _len(args) else None
        if importing and group != "write" and (strict is UNTRUSTED or strict is None):
            strict = HARNESS  # the import machinery reading a module's files (the import itself was vetted)
        if strict is UNTRUSTED or strict is None:
            shown = normalise(target) if _type(target) in (_str, _bytes) else (
                f"descriptor {target}" if _type(target) is _int else None)
            return f"{'of ' + shown + ' ' if shown else ''}({words(UNTRUSTED, culprit)} touches no file)"
        if target is None:
            return None
        if _type(target) is _int and group != "write":
            return None  # a descriptor the process already holds (a pipe, a temporary file, a folder)
        writing = group == "write"
        if group == "read_or_write":
            mode = args[1] if _len(args) > 1 else None
            flags = args[2] if _len(args) > 2 else 0
            writing = ((_type(mode) is _str and ("w" in mode or "a" in mode or "x" in mode or "+" in mode))
                       or (_type(flags) is _int and flags & _WRITE_FLAGS != 0))
        path = normalise(target)
        if writing and strict is TRITON and not compiling:
            return f"writing {path} outside a compile"
        roots = (triton_write if strict is TRITON else harness_write) if writing else read_roots
        if not inside(path, roots):
            return f"{'writing' if writing else 'reading'} {path if path is not None else 'a path object'}"
        if event in ("os.rename", "os.link", "os.symlink") and _len(args) > 1:
            other = normalise(args[1])
            if not inside(other, triton_write if strict is TRITON else harness_write):
                return f"{event} to {other}"
        return None

    def decide(event, group, args, frame):
        """None (allowed) or why not."""
        loose, strict, importing, compiling, codegen, culprit = actors(frame)
        if group == "hooks" or group == "network" or group == "process":
            detail = args[0] if _len(args) and _type(args[0]) in (_str, _bytes, _int) else None
            return (f"{'(' + repr(detail)[:120] + ') ' if detail is not None else ''}is never allowed once the candidate "
                    f"is loaded, asked by {words(loose, culprit)}")
        if group == "frames" or group == "code":
            if loose is not UNTRUSTED and loose is not None:
                return None
            if importing and group == "code" and event in ("compile", "exec", "marshal.loads"):
                return None  # a vetted import compiling and running its module's code
            named = event == "compile" and _len(args) > 1 and not (_type(args[1]) is _str and args[1].startswith("<"))
            if codegen and not named:
                return None  # a dataclass, namedtuple, TypeVar or Enum being built (its code named "<string>")
            attribute = args[1] if event.startswith("object.") and _len(args) > 1 and _type(args[1]) is _str else None
            return f"{'of ' + attribute + ' ' if attribute else ''}by {words(loose, culprit)}"
        if group == "import":
            if loose is not UNTRUSTED and loose is not None:
                return None
            name = args[0] if _len(args) else None
            if _type(name) is _str and name.split(".")[0] in CANDIDATE_IMPORT_ROOTS:
                return None
            return f"of {name if _type(name) is _str else 'a module'} by {words(loose, culprit)}"
        if group == "env":  # torch and Triton set variables of their own; candidate code sets none
            if loose is not UNTRUSTED and loose is not None:
                return None
            name = args[0] if _len(args) and _type(args[0]) in (_str, _bytes) else None
            return f"of {name!r} by {words(loose, culprit)}"
        if group == "memory" or group == "native":
            if strict is TRITON or strict is HARNESS:
                return None
            return f"by {words(strict, culprit)}"
        if group == "spawn":
            if strict is not TRITON or not compiling:
                return f"by {words(strict, culprit)}{'' if strict is not TRITON else ' outside a compile'}"
            program = args[0] if _len(args) else None
            if program is None and _len(args) > 1 and _type(args[1]) in (list, _tuple) and _len(args[1]):
                program = args[1][0]
            if _type(program) is _bytes:
                program = program.decode("utf-8", "surrogateescape")
            if _type(program) is _str and basename(program) in COMPILER_TOOLS:
                return None
            return f"of {program if _type(program) is _str else 'a program'} by Triton"
        why = file_rule(group, event, args, strict, importing, compiling, culprit)
        return None if why is None else f"{why}, by {words(strict, culprit)}"

    def say(kind, event, why):
        line = "\n" + dumps({"kind": kind, "event": event, "why": why[:300], "nonce": nonce}) + "\n"
        data = line.encode("utf-8", "replace")
        while data:
            data = data[write(channel_fd, data):]

    def stop(event, why):
        if mode == "report":
            say("seal", event, why)
            return
        try:
            say("sealed", event, why)
        finally:
            exit_now(SEAL_EXIT)

    def hook(event, args, _ignored=_IGNORED):
        if event in _ignored:
            return
        group = events.get(event)
        if group is None:
            for prefix, g in prefixes:
                if event.startswith(prefix):
                    group = g
                    break
            else:
                return
        me = get_ident()
        if me in busy:
            return  # an event raised by the hook's own look at the stack
        busy.add(me)
        try:
            why = decide(event, group, args, getframe(1))
        except BaseException as exc:  # a fault in the seal itself: fail closed, and say so
            why = f"the seal could not decide ({_type(exc).__name__})"
        finally:
            busy.discard(me)
        if why is not None:
            stop(event, why)

    def check_import(name):
        if mode == "off":
            return
        if _type(name) is not _str or name.split(".")[0] not in CANDIDATE_IMPORT_ROOTS:
            stop("import", f"of {name if _type(name) is _str else 'a module'} by candidate code")

    def stack_owner(frame, bench):
        """For the torch-op monitor: 'candidate', 'triton-bench' (an op made by Triton's benchmarking
        itself: the nearest frame outside torch is one of `bench`, (file suffix, function name) pairs),
        'triton', or None. What a benchmarking function calls back into (the launch it times, and in it
        the heuristics, the grid, whatever callables the candidate handed over, builtins and partials
        included, which leave no frame of their own) is not the benchmarking's: past such a frame the
        walk goes on to the candidate's launcher. Walks with the hook's own events skipped."""
        me = get_ident()
        nested = me in busy
        busy.add(me)
        try:
            seen_triton = False
            direct = True  # only torch's own frames so far
            depth = 0
            while frame is not None and depth < 400:
                if _type(frame) is not frame_type:
                    return UNTRUSTED
                code = frame.f_code
                cat = file_category(code.co_filename)
                if cat is UNTRUSTED:
                    return UNTRUSTED
                if cat is TRITON:
                    seen_triton = True
                    if direct:
                        for suffix, name in bench:
                            if code.co_name == name and code.co_filename.endswith(suffix):
                                return "triton-bench"
                if cat is not TORCH:
                    direct = False
                frame = frame.f_back
                depth += 1
            return TRITON if seen_triton else None
        finally:
            if not nested:
                busy.discard(me)

    def verdict(event, args, frame):
        """The seal's answer for an event raised at `frame`, without acting on it (for tests)."""
        group = events.get(event) or next((g for prefix, g in prefixes if event.startswith(prefix)), None)
        return None if group is None else decide(event, group, args, frame)

    if mode != "off":
        sys.addaudithook(hook)
    return Seal(stack_owner=stack_owner, check_import=check_import, verdict=verdict)


def candidate_builtins(on_import):
    """The builtins candidate code runs with: the real ones, with `__import__` checked first by
    `on_import(name)` (an import of a module already loaded raises no audit event)."""
    import builtins
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            on_import(name)
        return real_import(name, globals, locals, fromlist, level)

    table = dict(vars(builtins))
    table["__import__"] = guarded_import
    return table


def harness_objects(harness_module) -> list:
    """The modules and classes whose attributes the harness relies on after the seal: the timer, the
    monitor's machinery, Triton's launch path and the methods by which it reads a kernel's source, torch's tensor and event classes, the builtins, the
    protocol's messages (with pydantic's model classes) that carry the record and the replies, and the
    writer of the outputs' files (tensor_file; the judge's reader trusts nothing in them regardless)."""
    import builtins
    import time as time_module

    import pydantic
    import torch
    import triton
    import triton.runtime.autotuner as autotuner
    import triton.runtime.jit as jit
    from torch.utils import _python_dispatch

    from kernels.evaluator import protocol, tensor_file, timing
    objects = [builtins, time_module, os, json, threading, torch, torch.cuda, torch.serialization, _python_dispatch,
               triton, jit, autotuner, timing, protocol, tensor_file, pydantic.BaseModel, pydantic.RootModel, sys.modules[__name__],
               harness_module,
               jit.JITFunction, jit.JITCallable, jit.KernelInterface, autotuner.Autotuner, autotuner.Heuristics, torch.Tensor,
               torch.nn.Module, torch.nn.Parameter, _python_dispatch.TorchDispatchMode, threading.Thread, Integrity]
    objects += [c for c in torch.cuda.Event.__mro__ + torch.cuda.Stream.__mro__ if c is not object]
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if interpreter is not None:
        objects += [interpreter, interpreter.InterpretedFunction, interpreter.FunctionRewriter]
    runtime = sys.modules.get("kernels.problems.kernelbench_runtime")
    if runtime is not None:
        objects += [runtime, runtime.CandidateModel, runtime.FileReference]
    for module in (harness_module, protocol):
        objects += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    return list({id(o): o for o in objects}.values())


class Integrity:
    """The harness's modules and classes as they were when the seal went on, compared later: a class
    method or a module function replaced (a timer, Triton's launcher, the monitor, a tensor method a
    lazy output would hook) shows as a change. For modules, the names they had then; for classes, every
    name, new ones included (a method added to torch.Tensor shadows its base's), and their bases."""

    def __init__(self, objects: list) -> None:
        self.snapshot = []
        for obj in objects:
            names = dict(vars(obj))
            label = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "?")
            if isinstance(obj, type):
                label = f"{obj.__module__}.{obj.__qualname__}"
            self.snapshot.append((obj, label, names, isinstance(obj, type), getattr(obj, "__mro__", None)))

    def changes(self) -> list[str]:
        changed = []
        for obj, label, names, is_class, mro in self.snapshot:
            now = vars(obj)
            for name, value in names.items():
                if name not in now or now[name] is not value:
                    if not _volatile(name, value):
                        changed.append(f"{label}.{name}")
            if is_class:
                changed += [f"{label}.{name} (added)" for name in now if name not in names and name not in _CACHED]
                if obj.__mro__ != mro:
                    changed.append(f"{label} (bases)")
        return changed[:20]


_CACHED = frozenset({"__slotnames__"})  # what copyreg caches on a class the first time it pickles one


def _volatile(name: str, value) -> bool:
    """Module state that changes by itself: counters, flags, caches (plain data, not code). A pydantic
    model's validator and serializer (`__pydantic_*__`) are its code, though objects."""
    if name.startswith("__pydantic_"):
        return False
    return not isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                                  types.ModuleType, staticmethod, classmethod, property, frozenset))
