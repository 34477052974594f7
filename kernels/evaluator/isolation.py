"""Operating-system fences around the candidate's process, in layers that each work alone.

The static policy (kernels.evaluator.policy) is the first gate: a candidate cannot even name os, socket or
subprocess. These fences hold if someone finds a way past it:

- `unshare_network()`: a network namespace of its own (root only): no interface but a down loopback.
  For the calling thread and what it starts later; sockets that exist already keep working.
- `restrict_filesystem(writable)`: Landlock (Linux >= 5.13): writes only beneath the scratch
  directory, the Triton cache and /dev; no TCP bind or connect (ABI >= 4); no signals to, or
  abstract sockets of, processes outside the sandbox (ABI >= 6). Works as root too.
- `install_seccomp(allow_exec_children)`: a seccomp filter: no sockets but AF_UNIX, no fork (threads
  only; vfork+exec only where Triton must run ptxas), no io_uring, no foreign-ABI system calls.
- `process_tree(token)` / `kill_tree(token)`: every process that carries the sandbox's token in its
  environment or descends from it, found through /proc, so that a fork bomb's survivors die too.

Each fence reports whether it took; the judge puts the ones that did not into the verdict's flags.
All of this is Linux-only; elsewhere every fence reports itself as unavailable."""
from __future__ import annotations

import ctypes
import os
import platform
import signal
import struct
import time

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    return _libc


# --- per-architecture system call numbers --------------------------------------------------------
_ARCH = {
    # machine: (AUDIT_ARCH, socket, clone, clone3, fork or None, io_uring_setup, seccomp, landlock base)
    "x86_64": (0xC000003E, 41, 56, 435, 57, 425, 317, 444),
    "aarch64": (0xC00000B7, 198, 220, 435, None, 425, 277, 444),
}
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000
CLONE_VFORK = 0x00004000


def unshare_network() -> bool:
    """A network namespace of our own: nothing outside this machine, not even its loopback."""
    try:
        return libc().unshare(CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    try:
        libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_CAPSET = {"x86_64": 126, "aarch64": 91}
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAP_VERSION_3 = 0x20080522


def drop_capabilities() -> bool:
    """Gives up every capability (bounding, ambient, effective, permitted, inheritable) and sets
    no_new_privs, so an exec cannot win them back. For a sandbox started as root: without
    CAP_SYS_PTRACE it cannot read a non-dumpable process's environ, cmdline or memory, and without
    CAP_DAC_OVERRIDE it cannot open other users' files. True when none is left."""
    machine = platform.machine()
    if machine not in _CAPSET:
        return False
    lc = libc()
    for cap in range(64):
        lc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: harmless
    lc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    lc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all zero
    if lc.syscall(_CAPSET[machine], ctypes.byref(header), ctypes.byref(data)) != 0:
        return False
    try:
        with open("/proc/self/status") as f:
            return all(int(line.split()[1], 16) == 0 for line in f
                       if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")))
    except (OSError, ValueError):
        return False


# --- Landlock ------------------------------------------------------------------------------------
_FS_WRITE = (1 << 1)  # WRITE_FILE
_FS_TREE = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # REMOVE_*, MAKE_*
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


def landlock_abi() -> int:
    arch = _ARCH.get(platform.machine())
    if arch is None:
        return 0
    try:
        abi = libc().syscall(arch[7], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


def restrict_filesystem(writable: list[str], scope_abstract_unix: bool = True, tcp: bool = False) -> int:
    """Landlock: writes only beneath `writable`; no TCP; no signals out. Returns the ABI used, 0 if
    Landlock is not available (the caller reports that). Applies to the calling thread and the
    threads and processes it creates afterwards (threads that exist already, such as CUDA's and
    torch's pools, run no Python code of the candidate's). `tcp`: leave TCP alone (a task's setup,
    which fetches its packages)."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    base = _ARCH[platform.machine()][7]
    fs = _FS_WRITE | _FS_TREE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 and not tcp else 0
    scoped = ((_SCOPE_ABSTRACT_UNIX if scope_abstract_unix else 0) | _SCOPE_SIGNAL) if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("QQQ", fs, net, scoped)
    elif abi >= 4:
        attr = struct.pack("QQ", fs, net)
    else:
        attr = struct.pack("Q", fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    lc = libc()
    ruleset = lc.syscall(base, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(path)
                allowed = fs if is_dir else (fs & (_FS_WRITE | _FS_TRUNCATE))
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                lc.syscall(base + 1, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0))
            finally:
                os.close(fd)
        lc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if lc.syscall(base + 2, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


# --- seccomp -------------------------------------------------------------------------------------
def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_ABS_W, _JEQ, _JSET, _JGE, _RET = 0x20, 0x15, 0x45, 0x35, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000


def _seccomp_program(allow_exec_children: bool) -> bytes | None:
    arch = _ARCH.get(platform.machine())
    if arch is None:
        return None
    audit, nr_socket, nr_clone, nr_clone3, nr_fork, nr_uring, _, _ = arch
    EACCES, EAGAIN, ENOSYS, EPERM = 13, 11, 38, 1
    # symbolic layout, resolved to relative jumps below
    prog: list[tuple] = [
        ("ld", 4),                                  # arch
        ("jeq", audit, None, "deny_eperm"),
        ("ld", 0),                                  # system call number
        ("jge", 0x40000000, "deny_eperm", None),    # x32 ABI on x86_64
        ("jeq", nr_socket, "socket", None),
        ("jeq", nr_clone, "clone", None),
        ("jeq", nr_clone3, "deny_enosys", None),    # flags live in memory: make libc fall back to clone
        ("jeq", nr_uring, "deny_eperm", None),
    ]
    if nr_fork is not None:
        prog.append(("jeq", nr_fork, "deny_eagain", None))
    prog += [
        ("ret", _ALLOW),
        "socket", ("ld", 16),                       # args[0]: the domain
        ("jeq", 1, "allow", "deny_eacces"),         # AF_UNIX only
        "clone", ("ld", 16),                        # args[0]: the flags
        ("jset", CLONE_THREAD, "allow", None),      # a thread
        ("jset", CLONE_VFORK, "allow" if allow_exec_children else "deny_eagain", "deny_eagain"),
        "allow", ("ret", _ALLOW),
        "deny_eacces", ("ret", _ERRNO | EACCES),
        "deny_eagain", ("ret", _ERRNO | EAGAIN),
        "deny_enosys", ("ret", _ERRNO | ENOSYS),
        "deny_eperm", ("ret", _ERRNO | EPERM),
    ]
    labels, flat = {}, []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(flat)
        else:
            flat.append(item)
    out = b""
    for i, ins in enumerate(flat):
        op = ins[0]
        if op == "ld":
            out += _bpf(_LD_ABS_W, 0, 0, ins[1])
        elif op == "ret":
            out += _bpf(_RET, 0, 0, ins[1])
        else:
            code = {"jeq": _JEQ, "jset": _JSET, "jge": _JGE}[op]
            jt = 0 if ins[2] is None else labels[ins[2]] - (i + 1)
            jf = 0 if ins[3] is None else labels[ins[3]] - (i + 1)
            assert 0 <= jt < 256 and 0 <= jf < 256
            out += _bpf(code, jt, jf, ins[1])
    return out


def install_seccomp(allow_exec_children: bool) -> bool:
    """Filter this process's system calls (all its threads: TSYNC). Survives exec."""
    arch = _ARCH.get(platform.machine())
    program = _seccomp_program(allow_exec_children)
    if arch is None or program is None:
        return False
    n = len(program) // 8
    filt = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(n, ctypes.cast(filt, ctypes.c_void_p))
    lc = libc()
    if lc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
    rc = lc.syscall(arch[6], ctypes.c_uint(SECCOMP_SET_MODE_FILTER), ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC),
                    ctypes.byref(fprog))
    return rc == 0


# --- finding and killing a sandbox's processes ---------------------------------------------------
def _environ_has(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


def _parents() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            if fields[0] != b"Z":  # a zombie is dead already; its parent reaps it
                out[int(name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


def process_tree(root_pid: int, token: str, orphans: bool = True) -> list[int]:
    """The sandbox's processes: descendants of root_pid, and any process whose environment carries
    the token (orphans of a fork bomb that called setsid land elsewhere in the tree)."""
    if not os.path.isdir("/proc"):
        return []
    parents = _parents()
    marker = f"MARATHON_SANDBOX={token}".encode()
    found = {root_pid} if root_pid in parents else set()
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    me = os.getpid()
    for pid in (parents if orphans else ()):
        if pid not in found and pid != me and _environ_has(pid, marker):
            found.add(pid)
    return sorted(found)


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def kill_tree(root_pid: int, token: str, rounds: int = 20) -> int:
    """Stop, then kill, every process of the sandbox until none is left. Returns how many died."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = [p for p in process_tree(root_pid, token) if p != os.getpid()]
        if not pids:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        killed.update(pids)
        time.sleep(0.02)
    return len(killed)
