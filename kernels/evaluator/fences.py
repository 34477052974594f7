"""What the sandboxed processes (the candidate's, kernels/evaluator/candidate_process.py, and a file
problem's, kernels/evaluator/problem_process.py) may read, write and start, and the order in which
their fences go up. The mechanisms are in kernels/evaluator/isolation.py; the judge passes the
switches and the scratch paths in each process's assignment.

Reads: an allowlist of what Python, torch, Triton, CUDA and the compilers Triton runs need (the
interpreter's standard library and site-packages, system libraries and headers, CUDA's and the
driver's folders, a few files under /etc, this process's own /proc entries and a few system-wide
ones, CPU and PCI facts under /sys, the device nodes), the project's `kernels` package (the evaluator
and the problems, nothing else of the project's) and the scratch paths the judge names. Not /tmp
outside them, not the user's home, not another process's /proc.

Processes: none on the CPU (seccomp refuses fork, vfork and exec). On CUDA Triton runs ptxas for every
kernel it compiles and the C compiler (with its cc1, as, collect2 and ld) for each new launcher, so
exactly those programs (and the dynamic loader they need) may be started, each named to Landlock;
a file problem's process may also start the C++ compiler, which torch.compile's baselines need. A
shell cannot start. Whatever does start dies with the sandbox (its PID namespace)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from kernels.evaluator import isolation

PROJECT_ROOT = Path(__file__).resolve().parents[2]

SYSTEM_READABLE = (
    "/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/usr/local/lib", "/usr/libexec",
    "/usr/include", "/usr/local/include", "/usr/share/zoneinfo", "/usr/share/locale",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd", "/etc/group",
    "/etc/nsswitch.conf",
    "/usr/local/cuda", "/usr/local/nvidia", "/opt/nvidia",
    "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/filesystems", "/proc/devices",
    "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/random", "/proc/driver/nvidia",
    "/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/bus/pci", "/sys/module/nvidia",
    "/sys/kernel/mm/transparent_hugepage",
    "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
)
SYSTEM_READABLE_GLOBS = ("/sys/devices/pci*", "/usr/local/cuda-*")
# device nodes the sandbox may write: its GPU's (CUDA opens them for reading and writing) and /dev/null;
# on CUDA also /dev/shm, where the driver keeps shared memory of its own (a tmpfs of the sandbox's own
# where its mount namespace could be made: isolation.PRIVATE_DEV_SHM)
DEVICE_WRITABLE = ("/dev/null",)
DEVICE_WRITABLE_GLOBS_CUDA = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/shm")
# What each kind of sandbox may start (seccomp lets nothing start under "none").
TOOLCHAINS = ("none", "triton", "torch-compile")


def _too_broad(path: str, scratch: list[str]) -> bool:
    """A readable path that would open the project, the scratch's neighbours, a source checkout (a
    path entry of an editable install, say) or the whole host."""
    real = os.path.realpath(path)
    if real == "/" or os.path.exists(os.path.join(real, ".git")):
        return True
    for inside in [str(PROJECT_ROOT), "/tmp", os.path.expanduser("~"), *scratch]:
        inside = os.path.realpath(inside)
        if inside == real or inside.startswith(real.rstrip("/") + "/"):
            return True
    return False


def readable_paths(device: str, scratch: list[str]) -> list[str]:
    """What the process may read besides `scratch` (and its writable paths)."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    paths += [v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib",
                                                                  "include", "platinclude")]
    paths += [str(PROJECT_ROOT / "kernels")]
    paths += list(SYSTEM_READABLE)
    for pattern in SYSTEM_READABLE_GLOBS:
        paths += glob.glob(pattern)
    for var in ("CUDA_HOME", "CUDA_PATH", "TRITON_HOME"):
        if os.environ.get(var):
            paths.append(os.environ[var])
    paths += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if device == "cuda":  # where Triton found libcuda (its launchers link against it), wherever that is
        try:
            from triton.backends.nvidia.driver import libcuda_dirs
            paths += list(libcuda_dirs())
        except Exception:  # no NVIDIA backend, or no libcuda: nothing to add
            pass
    out = []
    for p in paths:
        p = os.path.abspath(p)
        if os.path.exists(p) and p not in out and not _too_broad(p, scratch):
            out.append(p)
    return out


def writable_paths(device: str, scratch: list[str]) -> list[str]:
    out = list(scratch) + list(DEVICE_WRITABLE)
    if device == "cuda":
        for pattern in DEVICE_WRITABLE_GLOBS_CUDA:
            out += sorted(glob.glob(pattern))
    return out


def _program(name: str | None) -> str | None:
    if not name:
        return None
    found = name if os.path.isabs(name) else shutil.which(name)
    return os.path.realpath(found) if found and os.access(found, os.X_OK) else None


def _compiler_programs(compiler: str | None, helpers: tuple[str, ...]) -> list[str]:
    """A compiler driver and the programs it starts, as it finds them itself (-print-prog-name)."""
    driver = _program(compiler)
    if driver is None:
        return []
    out = [driver]
    for helper in helpers:
        try:
            named = subprocess.run([driver, f"-print-prog-name={helper}"], capture_output=True, text=True,
                                   timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = _program(named)
        if found:
            out.append(found)
    return out


def toolchain_programs(toolchain: str) -> list[str]:
    """The programs a sandbox of this kind may start, with their ELF interpreters; scripts are left out
    (their interpreter would be a shell)."""
    if toolchain == "none":
        return []
    import triton
    nvidia_bin = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin"
    programs = [str(nvidia_bin / "ptxas"), str(nvidia_bin / "ptxas-blackwell"),
                os.environ.get("TRITON_PTXAS_PATH"), os.environ.get("TRITON_PTXAS_BLACKWELL_PATH")]
    programs = [_program(p) for p in programs]
    # the C compiler as Triton's launcher build picks it (triton/runtime/build.py)
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    programs += _compiler_programs(cc, ("cc1", "as", "collect2", "ld", "lto-wrapper"))
    if toolchain == "torch-compile":  # inductor's C++ compiler (torch._inductor.config.cpp.cxx)
        programs += _compiler_programs(os.environ.get("CXX") or "g++", ("cc1plus", "as", "collect2", "ld"))
        # and `nvcc --version`, which every inductor compile runs for its repro's comment where nvcc is on
        # the PATH: refused, it fails the compile (only its absence is caught). nvcc's own helpers (cicc,
        # fatbinary) stay refused: nothing inductor does for a Triton baseline needs them
        programs.append(_program("nvcc"))
        # inductor points Triton at the ptxas torch's CUDA wheel ships (TRITON_PTXAS_PATH, set at its first
        # compile, after the fences are up), where there is one
        import torch
        programs.append(_program(str(Path(torch.__file__).resolve().parent / "bin" / "ptxas")))
    out: list[str] = []
    for p in programs:
        if not p or p in out:
            continue
        interp = isolation.elf_interpreter(p)
        if interp is None:
            continue  # not a dynamically linked or static ELF program we can vouch for: a script
        out.append(p)
        if interp:
            real = os.path.realpath(interp)
            if real not in out:
                out.append(real)
    return out


def put_up(device: str, *, writable: list[str], readable: list[str], toolchain: str, netns: bool, landlock: bool,
           landlock_reads: bool, landlock_exec: bool, seccomp: bool, drop_capabilities: bool) -> dict:
    """The fences, in order, once CUDA and Triton have started (CUDA's initialisation failed under
    them on the H200 machines when they came first) and before any untrusted code: a network namespace
    of its own; Landlock (reads, writes and programs as above, no TCP; on the CPU also no abstract unix
    sockets out); no capabilities; seccomp (no socket() at all, so no Unix socket of a path; socketpair for
    streams only; no processes but the toolchain's, no io_uring). Returns what took, for the verdict's `sandbox`."""
    facts: dict = {}
    toolchain = toolchain if toolchain in TOOLCHAINS else "none"
    programs = toolchain_programs(toolchain) if toolchain != "none" else []
    facts["pid_namespace"] = isolation.PID_NAMESPACE or False
    facts["private_dev_shm"] = isolation.PRIVATE_DEV_SHM
    facts["own_proc"] = isolation.OWN_PROC
    if netns:
        facts["netns"] = isolation.unshare_network()
    if landlock:
        all_writable = writable_paths(device, writable)
        all_readable = (readable + readable_paths(device, writable + readable)) if landlock_reads else None
        executable = programs if landlock_exec else None
        abi = isolation.restrict_filesystem(all_writable, scope_abstract_unix=device != "cuda",
                                            readable=all_readable, executable=executable)
        facts["landlock"] = abi > 0
        facts["landlock_abi"] = abi  # TCP rules need 4, scoped signals and abstract sockets 6
        facts["landlock_reads"] = abi > 0 and all_readable is not None
        facts["landlock_exec"] = abi > 0 and executable is not None
    else:
        facts["landlock"] = facts["landlock_reads"] = facts["landlock_exec"] = False
    if drop_capabilities:  # root's, or those of its own user namespace: they would open every process's /proc files
        facts["capabilities_dropped"] = isolation.drop_capabilities()
    allow_exec = toolchain != "none"
    facts["seccomp"] = bool(seccomp) and isolation.install_seccomp(allow_exec=allow_exec)
    facts["unix_socket_denied"] = isolation.unix_socket_refused()  # docker.sock, D-Bus: seen refused, not assumed
    if not allow_exec and facts["seccomp"]:
        facts["processes"] = "none"
    elif facts["landlock_exec"]:
        facts["processes"] = f"{toolchain} toolchain only: " + ", ".join(os.path.basename(p) for p in programs)
    else:
        facts["processes"] = "any program (no Landlock executable allowlist)"
    return facts


def start_device(device: str) -> None:
    """What must start before the fences: CUDA's context, and Triton's driver (it asks /sbin/ldconfig
    where libcuda is, and builds its own helper module, the first time it compiles), by compiling and
    launching one trivial kernel. On the CPU nothing needs it."""
    if device != "cuda":
        return
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _touch(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    x = torch.zeros(16, device="cuda")
    _touch[(1,)](x, 16, BLOCK=16)
    torch.cuda.synchronize()
