"""Operating-system fences around the candidate's process, in layers that each work alone.

The static policy (kernels.evaluator.policy) is the first gate: a candidate cannot even name os, socket or
subprocess. These fences hold if someone finds a way past it:

- `enter_pid_namespace()`: the sandbox's process becomes PID 1 of a PID namespace of its own (as root;
  otherwise inside a user namespace of its own, where the kernel allows one), so every process it or
  anything below it starts dies with it, detached (setsid) or not.
- `unshare_network()`: a network namespace of its own (root, or inside its own user namespace): no
  interface but a down loopback. For the calling thread and what it starts later; sockets that
  exist already keep working.
- `restrict_filesystem(writable, readable, executable)`: Landlock (Linux >= 5.13): reads only beneath
  an allowlist (what Python, torch, Triton and CUDA need, and the scratch directory), writes only
  beneath the scratch directory and Triton's cache, and no program may be started but those named
  (none on the CPU; ptxas and the C compiler's own on CUDA); no TCP bind or connect (ABI >= 4); no
  signals to, or abstract sockets of, processes outside the sandbox (ABI >= 6). Works as root too.
- `install_seccomp(allow_exec)`: a seccomp filter: no socket() at all (a Unix socket of a path is
  reached through the file system, which neither the network namespace nor Landlock governs: the
  host's docker.sock, D-Bus, systemd's), only connected pairs of Unix stream or seqpacket sockets
  (socketpair: no address, nothing outside reached), no fork (threads only), no
  vfork, clone-with-vfork or exec at all unless allowed (only where Triton must run ptxas and the
  C compiler, and then Landlock names the programs), no io_uring, no foreign-ABI system calls.
- `drop_capabilities(keep)`: every capability but those kept, the bounding set included.
- `process_tree(token)` / `kill_tree(token)`: every process that carries the sandbox's token in its
  environment or descends from it, found through /proc, so that a fork bomb's survivors die too
  where no PID namespace holds them.
- `become_subreaper()` / `end_adopted(keep)`: the judge adopts every orphan below it (a detached
  process whose parent died, however it left its session or emptied its environment), and ends
  those it did not start; this holds where no PID namespace can be made.

Each fence reports whether it took; the judge puts the ones that did not into the verdict's flags.
All of this is Linux-only; elsewhere every fence reports itself as unavailable."""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import platform
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

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
    # machine: (AUDIT_ARCH, socket, clone, clone3, fork or None, io_uring_setup, seccomp, landlock base,
    #           vfork or None, execve, execveat, socketpair)
    "x86_64": (0xC000003E, 41, 56, 435, 57, 425, 317, 444, 58, 59, 322, 53),
    "aarch64": (0xC00000B7, 198, 220, 435, None, 425, 277, 444, None, 221, 281, 199),
}
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000
CLONE_VFORK = 0x00004000


def unshare_network() -> bool:
    """A network namespace of our own: nothing outside this machine, not even its loopback."""
    try:
        return libc().unshare(CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


# --- a PID namespace per sandbox ------------------------------------------------------------------
PID_NAMESPACE = ""  # how this process came to be PID 1 of its own namespace ("" where it did not)
PRIVATE_DEV_SHM = False  # whether /dev/shm is a small tmpfs of its own (its mount namespace's)
OWN_PROC = False  # whether /proc is the namespace's own (its processes only; /proc/1 is itself)
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
DEV_SHM_SIZE = "64m"


def private_mounts(dev_shm: bool = True) -> tuple[bool, bool]:
    """In a mount namespace of our own (made with the PID namespace), as its PID 1: (1) with `dev_shm`,
    /dev/shm becomes a small tmpfs that no other process sees (CUDA's driver keeps shared memory there;
    the host's would be readable, and every sandbox is PID 1, so files named by pid would collide), freed
    when the namespace ends; (2) /proc becomes the namespace's own. With the host's /proc, getpid() (1)
    names the host's init there: CUDA's driver, which looks itself up under /proc/<getpid()>, fails;
    with its own, /proc/1 is this process and no other process of the host can be seen at all.
    Returns whether each took."""
    lc = libc()
    lc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    if lc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False, False  # nothing below may be mounted: it would show outside the namespace
    shm = dev_shm and os.path.isdir("/dev/shm") and lc.mount(
        b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={DEV_SHM_SIZE},mode=1777".encode()) == 0
    proc = os.path.isdir("/proc") and lc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                               None) == 0
    return shm, proc


def own_user_namespace() -> bool:
    """A user namespace of our own, our uid and gid mapped to themselves: inside it this process
    holds the capabilities that unsharing PID and network namespaces needs, and nothing outside it.
    For a sandbox started without root; False where the kernel refuses (a sysctl, an LSM)."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 and not capability_sets().get("CapEff", 0) >> CAP_SETFCAP & 1:
        return False  # root without capabilities may not map root into a namespace (Linux >= 5.12)
    if libc().unshare(CLONE_NEWUSER) != 0:
        return False
    try:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as f:
                f.write(text)
    except OSError:
        return False
    return True


def unshare_pid_namespace() -> tuple[str, bool]:
    """A new PID namespace (and a mount namespace with it, where one can be made) for this process's
    next child: as root, or else inside a user namespace of its own. Returns how it was made ("root",
    "user namespace", or "" when none could be) and whether the mount namespace was."""
    lc = libc()
    for who in ("root", "user namespace"):
        if who == "user namespace" and not own_user_namespace():
            break
        if lc.unshare(CLONE_NEWPID | CLONE_NEWNS) == 0:
            return who, True
        if lc.unshare(CLONE_NEWPID) == 0:
            return who, False
    return "", False


def enter_pid_namespace() -> str:
    """Makes the rest of this program run as PID 1 of a new PID namespace: when it exits, the kernel
    kills every process left in the namespace, whatever it did to leave its process group or session.
    A PID namespace holds on any Linux (a cgroup needs a delegated hierarchy, which GPU hosts and
    containers often lack) and leaves devices alone, so the sandbox still sees its GPU.

    The caller forks: the child returns (as PID 1), and this process stays behind as a keeper, which
    holds no descriptor of the child's, waits for it, and exits as it did (the same status, or the
    same signal), so its parent sees the sandbox's own exit. The keeper dies with its parent and the
    child with the keeper (parent-death signals), so the whole namespace goes with the judge.

    With a mount namespace too (where it can be made), the child gets a /dev/shm and a /proc of its own.

    Returns how the namespace was made ("root", or "user namespace" without root) in the child, or ""
    in this process when no namespace could be made (then nothing forks)."""
    how, mounts = unshare_pid_namespace()
    if not how:
        return ""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()  # Python's fork: the child runs Python on; no thread exists yet
    if pid == 0:
        set_parent_death_signal(signal.SIGKILL)
        global PID_NAMESPACE, PRIVATE_DEV_SHM, OWN_PROC
        PID_NAMESPACE = how
        if mounts:  # never without a mount namespace of its own: the host's mounts would change
            PRIVATE_DEV_SHM, OWN_PROC = private_mounts()
        return how
    _keep(pid)
    return ""  # not reached: the keeper exits


def _keep(child: int) -> None:
    """The keeper's whole life: nothing of the sandbox's stays open here (its reply pipe must close
    when the child dies), the child is waited for, and its ending is passed on as this process's."""
    os.closerange(3, 1 << 16)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is to carry on
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """This process gets `sig` when the thread that started it ends: the one place the evaluator's and
    the servers' children are tied to their parents (called after fork; libc() must be loaded before)."""
    try:
        libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_CAPSET = {"x86_64": 126, "aarch64": 91}
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAP_VERSION_3 = 0x20080522


CAP_SETPCAP, CAP_SYS_ADMIN, CAP_SETFCAP = 8, 21, 31


def capability_sets() -> dict[str, int]:
    """This process's capability sets from /proc/self/status (CapEff, CapPrm, CapBnd, ...)."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Cap"):
                    name, value = line.split(":")
                    out[name] = int(value, 16)
    except (OSError, ValueError):
        pass
    return out


def drop_capabilities(keep: tuple[int, ...] = (), no_new_privs: bool = True) -> bool:
    """Gives up every capability but `keep` (bounding, ambient, effective, permitted, inheritable),
    and with no_new_privs an exec cannot win any back. For a process started as root: without
    CAP_SYS_PTRACE it cannot read a non-dumpable process's environ, cmdline or memory, and without
    CAP_DAC_OVERRIDE it cannot open other users' files. True when exactly `keep` (or less) is left."""
    machine = platform.machine()
    if machine not in _CAPSET:
        return False
    lc = libc()
    for cap in range(64):
        if cap not in keep:
            lc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: harmless
    lc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if no_new_privs:
        lc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    mask = sum(1 << c for c in keep) & capability_sets().get("CapPrm", 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    # two {effective, permitted, inheritable}: the low and the high 32 bits
    data = (ctypes.c_uint32 * 6)(mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, 0, mask >> 32, mask >> 32, 0)
    if lc.syscall(_CAPSET[machine], ctypes.byref(header), ctypes.byref(data)) != 0:
        return False
    sets = capability_sets()
    allowed = sum(1 << c for c in keep)
    return bool(sets) and all(sets.get(k, 0) & ~allowed == 0 for k in ("CapEff", "CapPrm", "CapBnd"))


def capability_names(mask: int) -> list[str]:
    """Names of the capabilities in a mask (the ones this evaluator keeps or reports)."""
    known = {21: "SYS_ADMIN", 19: "SYS_PTRACE", 1: "DAC_OVERRIDE", 2: "DAC_READ_SEARCH", 5: "KILL",
             12: "NET_ADMIN", 24: "SYS_RESOURCE", 8: "SETPCAP"}
    return [known.get(c, f"cap{c}") for c in range(64) if mask >> c & 1]


# --- Landlock ------------------------------------------------------------------------------------
_FS_EXECUTE, _FS_WRITE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_TREE = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # REMOVE_*, MAKE_*
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FS_READ = _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE | _FS_READ_FILE | _FS_TRUNCATE  # what a rule on a file may grant
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
# Descriptors of the pseudo-filesystem paths (/proc) that rules name, held open for the process's life:
# a rule sticks to an inode, and procfs makes a new inode for a path whose dentry it has dropped.
_PINNED: list[int] = []


def landlock_abi() -> int:
    arch = _ARCH.get(platform.machine())
    if arch is None:
        return 0
    try:
        abi = libc().syscall(arch[7], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


def restrict_filesystem(writable: list[str], scope_abstract_unix: bool = True, readable: list[str] | None = None,
                        executable: list[str] | None = None, tcp: bool = False) -> int:
    """Landlock: writes only beneath `writable` (files there, and device nodes named there); with
    `readable` (not None), reads only beneath `writable` and `readable`; with `executable` (not None),
    no program started but those files (none when empty); no TCP (`tcp`: left alone, for a task's
    setup, which fetches its packages); no signals out. Returns the ABI used, 0 if Landlock is not
    available (the caller reports that). Applies to the calling thread and the threads and processes
    it creates afterwards (threads that exist already, such as CUDA's and torch's pools, run no Python
    code of the candidate's). A path that does not exist is left out."""
    abi = landlock_abi()
    if abi < 1:
        return 0
    base = _ARCH[platform.machine()][7]
    write = _FS_WRITE | _FS_TREE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fs = write | (_FS_READ if readable is not None else 0) | (_FS_EXECUTE if executable is not None else 0)
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
    rules = [(p, write | _FS_READ) for p in writable]
    rules += [(p, _FS_READ) for p in readable or ()]
    rules += [(p, _FS_EXECUTE | _FS_READ_FILE) for p in executable or ()]
    try:
        for path, allowed in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    allowed &= _FILE_RIGHTS
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed & fs, fd), 12)
                lc.syscall(base + 1, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0))
            finally:
                if os.path.realpath(path).startswith("/proc/"):
                    _PINNED.append(fd)
                else:
                    os.close(fd)
        lc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if lc.syscall(base + 2, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


def elf_interpreter(path: str) -> str | None:
    """The program interpreter (the dynamic loader) an ELF executable names, or None: what the
    kernel must also be allowed to execute when it starts the program."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] not in (1, 2):
                return None
            e = "<" if head[5] == 1 else ">"
            if head[4] == 2:
                phoff, = struct.unpack(e + "Q", head[32:40])
                phentsize, phnum = struct.unpack(e + "HH", head[54:58])
            else:
                phoff, = struct.unpack(e + "I", head[28:32])
                phentsize, phnum = struct.unpack(e + "HH", head[42:46])
            for i in range(min(phnum, 64)):
                f.seek(phoff + i * phentsize)
                ph = f.read(phentsize)
                if struct.unpack(e + "I", ph[:4])[0] != 3:  # PT_INTERP
                    continue
                if head[4] == 2:
                    offset, size = struct.unpack(e + "Q", ph[8:16])[0], struct.unpack(e + "Q", ph[32:40])[0]
                else:
                    offset, size = struct.unpack(e + "I", ph[4:8])[0], struct.unpack(e + "I", ph[16:20])[0]
                f.seek(offset)
                return f.read(min(size, 4096)).rstrip(b"\0").decode() or None
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


# --- seccomp -------------------------------------------------------------------------------------
def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


_LD_ABS_W, _JEQ, _JSET, _JGE, _RET, _AND_K = 0x20, 0x15, 0x45, 0x35, 0x06, 0x54
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000


def assemble_bpf(prog: list) -> bytes:
    """A classic BPF program from a symbolic one: ("ld", offset), ("and", k), ("ret", value), (jump, k,
    true label or None, false label or None) with jump one of jeq, jset, jge, and label names (str)
    between; a label's jumps are resolved to relative offsets (None: the next instruction)."""
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
        elif op == "and":
            out += _bpf(_AND_K, 0, 0, ins[1])
        else:
            code = {"jeq": _JEQ, "jset": _JSET, "jge": _JGE}[op]
            jt = 0 if ins[2] is None else labels[ins[2]] - (i + 1)
            jf = 0 if ins[3] is None else labels[ins[3]] - (i + 1)
            assert 0 <= jt < 256 and 0 <= jf < 256
            out += _bpf(code, jt, jf, ins[1])
    return out


def _seccomp_program(allow_exec: bool) -> bytes | None:
    arch = _ARCH.get(platform.machine())
    if arch is None:
        return None
    audit, nr_socket, nr_clone, nr_clone3, nr_fork, nr_uring, _, _, nr_vfork, nr_execve, nr_execveat, nr_pair = arch
    EACCES, EAGAIN, ENOSYS, EPERM = 13, 11, 38, 1
    # symbolic layout, resolved to relative jumps below
    prog: list[tuple] = [
        ("ld", 4),                                  # arch
        ("jeq", audit, None, "deny_eperm"),
        ("ld", 0),                                  # system call number
        ("jge", 0x40000000, "deny_eperm", None),    # x32 ABI on x86_64
        ("jeq", nr_socket, "socket", None),
        ("jeq", nr_pair, "socketpair", None),
        ("jeq", nr_clone, "clone", None),
        ("jeq", nr_clone3, "deny_enosys", None),    # flags live in memory: make libc fall back to clone
        ("jeq", nr_uring, "deny_eperm", None),
    ]
    if nr_fork is not None:
        prog.append(("jeq", nr_fork, "deny_eagain", None))
    if not allow_exec:  # no process at all: vfork (what subprocess and posix_spawn use) and exec too
        if nr_vfork is not None:
            prog.append(("jeq", nr_vfork, "deny_eagain", None))
        prog += [("jeq", nr_execve, "deny_eacces", None), ("jeq", nr_execveat, "deny_eacces", None)]
    prog += [
        ("ret", _ALLOW),
        "socket", ("ld", 16),                       # args[0]: the domain
        ("jeq", 1, "deny_eperm", "deny_eacces"),    # AF_UNIX: EPERM (libc's nscd lookup falls back); others EACCES
        "socketpair", ("ld", 16),                   # args[0]: the domain
        ("jeq", 1, None, "deny_eperm"),             # AF_UNIX only
        ("ld", 24), ("and", 0xF),                   # args[1]: the type, less SOCK_NONBLOCK/SOCK_CLOEXEC
        ("jeq", 1, "allow", None),                  # SOCK_STREAM
        ("jeq", 5, "allow", "deny_eperm"),          # SOCK_SEQPACKET; not datagrams (SOCK_DGRAM, SOCK_RAW):
                                                    # sendto() names any path
        "clone", ("ld", 16),                        # args[0]: the flags
        ("jset", CLONE_THREAD, "allow", None),      # a thread
        ("jset", CLONE_VFORK, "allow" if allow_exec else "deny_eagain", "deny_eagain"),
        "allow", ("ret", _ALLOW),
        "deny_eacces", ("ret", _ERRNO | EACCES),
        "deny_eagain", ("ret", _ERRNO | EAGAIN),
        "deny_enosys", ("ret", _ERRNO | ENOSYS),
        "deny_eperm", ("ret", _ERRNO | EPERM),
    ]
    return assemble_bpf(prog)


def install_seccomp(allow_exec: bool) -> bool:
    """Filter this process's system calls (all its threads: TSYNC). Survives exec. Without
    `allow_exec` nothing can start a process (fork, vfork, clone without CLONE_THREAD, execve); with
    it vfork-style children may exec, and Landlock's executable allowlist says what."""
    arch = _ARCH.get(platform.machine())
    program = _seccomp_program(allow_exec)
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


def unix_socket_refused() -> bool:
    """Whether this process may not make a Unix socket with socket() (the probe behind the sandbox's
    `unix_socket_denied` fact): a socket of a path would reach the host's services, which no
    namespace or Landlock rule stops. No socket is bound or connected: the call itself is refused."""
    import socket
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    except PermissionError:
        return True
    except OSError:
        return False
    return False


# --- finding and killing a sandbox's processes ---------------------------------------------------
def _environ_has(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


def _stat(pid: int) -> list[bytes]:
    """/proc/PID/stat's fields after the command name: state, ppid, pgrp, session, ..."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2:].split()


MAX_FILES = 100_000  # files a sandbox's scratch folder (a task command: what it adds) may hold


def _weight(st: os.stat_result) -> int:
    return max(st.st_blocks * 512, st.st_size)


def disk_usage(root: Path | str, cap: int = MAX_FILES) -> tuple[int, int]:
    """(bytes, files) under `root` (or the file `root`), links not followed. A file weighs the larger of
    its blocks and its length: a sparse file (`truncate -s 1T`) holds no blocks yet is read or copied
    (the copy dense) at its full length. The walk stops past `cap` files (then the count is cap + 1 and
    the bytes those seen): a tree of millions of files costs a bounded walk, and its owner is told it
    has too many, never let past a quota unweighed."""
    root = Path(root)
    try:
        if not root.is_dir():
            return _weight(root.lstat()), 1
    except OSError:
        return 0, 0
    total, seen = 0, 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            seen += 1
            if seen > cap:
                return total, seen
            try:
                total += _weight(os.lstat(os.path.join(dirpath, name)))
            except OSError:
                pass
    return total, seen


def parent_pids() -> dict[int, int]:
    """{pid: parent's pid} of every living process this /proc lists (zombies are dead already)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = _stat(int(name))
            if fields[0] != b"Z":  # a zombie is dead already; its parent reaps it
                out[int(name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return out


SANDBOX_TOKEN_VAR = "MARATHON_SANDBOX"  # in every sandbox process's environment: its sandbox's token


def process_tree(root_pid: int, token: str, orphans: bool = True) -> list[int]:
    """The sandbox's processes: descendants of root_pid, and any process whose environment carries
    the token (orphans of a fork bomb that called setsid land elsewhere in the tree)."""
    if not os.path.isdir("/proc"):
        return []
    parents = parent_pids()
    marker = f"{SANDBOX_TOKEN_VAR}={token}".encode()
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


def become_subreaper() -> bool:
    """Orphans below this process are re-parented to it, not to init: whatever a sandbox starts
    stays in this process's tree even after its parent died (Linux >= 3.4)."""
    try:
        return libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def adopted(keep: set[int], any_session: bool = False) -> list[int]:
    """This process's living children that it did not start as sandboxes (`keep`) and that left its
    session: orphans a subreaper took in. Children it runs itself (nvidia-smi, a compiler) share its
    session and are left alone; with `any_session` (a process that runs nothing else) they count too."""
    me, mine = os.getpid(), os.getsid(0)
    out = []
    for pid, ppid in parent_pids().items():
        if ppid != me or pid in keep:
            continue
        try:
            if any_session or int(_stat(pid)[3]) != mine:
                out.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return out


def end_adopted(keep: set[int], rounds: int = 20, any_session: bool = False) -> int:
    """Kill every adopted orphan (adopted()) and all below it, until none is left, and reap them (they are
    this process's children now). Returns how many orphans were found."""
    ended: set[int] = set()
    for _ in range(rounds):
        orphans = adopted(keep, any_session)
        if not orphans:
            break
        for pid in orphans:
            kill_tree(pid, "", orphans=False)
        ended.update(orphans)
    for pid in ended:
        for _ in range(100):  # a process in the driver may take a moment to go
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.01)
    return len(ended)


# --- folders a live process holds ------------------------------------------------------------------
def _open_folder(folder: Path | str) -> int:
    """A descriptor of the folder itself, never of what a link at its path points to."""
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def hold_folder(folder: Path | str, shared: bool = False) -> int:
    """A lock on `folder` (not followed if it is a link) for as long as the returned descriptor is open:
    the kernel drops it when the holder dies, however it dies, so that remove_unheld knows a folder
    whose holder is gone. Shared: several holders at once (evaluations of the same problem file)."""
    fd = _open_folder(folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def held(folder: Path | str):
    fd = hold_folder(folder)
    try:
        yield
    finally:
        os.close(fd)


def remove_unheld(folders, older_than_s: float) -> list[str]:
    """Remove each of `folders` that is a folder (not a link), unchanged for `older_than_s` and held by
    nobody (hold_folder); a folder someone holds, or has just made and not yet locked, stays. Returns
    the names removed."""
    removed = []
    for folder in folders:
        folder = Path(folder)
        try:
            if folder.is_symlink() or not folder.is_dir() or time.time() - folder.stat().st_mtime < older_than_s:
                continue
            fd = _open_folder(folder)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live holder's
            os.close(fd)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
        finally:
            os.close(fd)
    return removed


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def kill_tree(root_pid: int, token: str, rounds: int = 20, orphans: bool = True) -> int:
    """Stop, then kill, every process of the sandbox until none is left. Returns how many died."""
    killed: set[int] = set()
    for _ in range(rounds):
        pids = [p for p in process_tree(root_pid, token, orphans=orphans) if p != os.getpid()]
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
