"""The artifact store: big things (full verdicts, long logs, kernel sources over the inline cap, the lab
notebook) in a directory, keyed by the SHA-256 of their content. History keeps only the key.

The directory is the worker's choice (`worker.py --artifacts DIR`, or MARATHON_ARTIFACTS); workers on
several hosts should share one (an NFS path, a mounted bucket).

Faults are said plainly: a full disk raises ArtifactStoreFull (the activity fails, Temporal retries it,
the run reports it), and an artifact whose bytes no longer hash to its key raises ArtifactCorrupt on
read (a later put of the same content repairs it). MARATHON_ARTIFACTS_QUOTA_BYTES caps the store's size,
as a small disk would: tests fill the store without filling the host."""
from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path

from kernels.settings import settings

DEFAULT_ROOT = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "kernel-marathon" / "artifacts"


def default_root() -> Path:
    return settings().artifacts or DEFAULT_ROOT


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ArtifactStoreFull(OSError):
    """No room left for an artifact (a full disk, a quota)."""


class ArtifactCorrupt(RuntimeError):
    """An artifact whose content no longer hashes to its key."""


class ArtifactStore:
    def __init__(self, root: str | Path | None = None, quota_bytes: int | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.quota_bytes = quota_bytes if quota_bytes is not None else settings().artifacts_quota_bytes

    def used_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.root.rglob("*") if f.is_file()) if self.root.exists() else 0

    def _full(self, exc: OSError | None, needed: int) -> ArtifactStoreFull:
        why = "no space left on device" if exc is None or exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        return ArtifactStoreFull(errno.ENOSPC, f"the artifact store at {self.root} is full ({why}; "
                                               f"{needed} bytes to write): free space or point --artifacts elsewhere")

    def _check_quota(self, needed: int) -> None:
        if self.quota_bytes is not None and self.used_bytes() + needed > self.quota_bytes:
            raise self._full(None, needed)

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise KeyError(f"not an artifact key: {key!r}")
        return self.root / "sha256" / key[:2] / key

    def put(self, text: str) -> str:
        """Store `text`; idempotent (a retried activity writes the same file again, harmlessly)."""
        key = sha256_text(text)
        path = self.path(key)
        damaged = path.exists()
        if damaged and self._intact(path, key):
            return key
        data = text.encode()
        self._check_quota(len(data) - (path.stat().st_size if damaged else 0))  # a repair replaces its bytes
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)  # also repairs a corrupted copy
        except OSError as exc:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._full(exc, len(data)) from None
            raise
        return key

    @staticmethod
    def _intact(path: Path, key: str) -> bool:
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest() == key
        except OSError:
            return False

    def get(self, key: str) -> str:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyError(f"artifact {key} is not in {self.root}") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != key:
            raise ArtifactCorrupt(f"artifact {key[:16]} is corrupted: its {len(data)} bytes in {self.root} hash to "
                                  f"{actual[:16]}, not to its key (a damaged disk or a hand edit); writing the same "
                                  f"content again repairs it")
        return data.decode("utf-8")

    def has(self, key: str) -> bool:
        return self.path(key).exists()

    # -- the verdicts a run's evaluations recorded: verdicts/<scope and workflow>/<source sha256>/<verdict key>,
    # each entry naming a full verdict stored (and hash-checked on read) as an artifact. Only evaluation
    # activities write them; a run looks a claimed best up here (activities.evaluation.find_verdict).
    def _verdict_dir(self, scope: str, workflow_id: str, source_sha256: str) -> Path:
        self.path(source_sha256)  # a key, not a path
        return self.root / "verdicts" / sha256_text(f"{scope}\0{workflow_id}") / source_sha256

    def record_verdict(self, scope: str, workflow_id: str, source_sha256: str, verdict_key: str) -> None:
        self.path(verdict_key)
        folder = self._verdict_dir(scope, workflow_id, source_sha256)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / verdict_key).touch()
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._full(exc, 0) from None
            raise

    def recorded_verdicts(self, scope: str, workflow_id: str, source_sha256: str) -> list[str]:
        """The keys of the verdicts recorded for a source, by name order (their content is checked on get)."""
        folder = self._verdict_dir(scope, workflow_id, source_sha256)
        try:
            return sorted(p.name for p in folder.iterdir() if len(p.name) == 64)
        except FileNotFoundError:
            return []

    def notebook_path(self, workflow_id: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in workflow_id)
        return self.root / "notebooks" / f"{safe}.md"

    def append_notebook(self, workflow_id: str, line: str) -> Path:
        path = self.notebook_path(workflow_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line.rstrip("\n") + "\n")
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._full(exc, len(line)) from None
            raise
        return path


def capped(text: str, cap: int, store: ArtifactStore) -> tuple[str, str | None]:
    """`text` cut to `cap` characters for history, and the key of the full text when it was cut."""
    if len(text) <= cap:
        return text, None
    key = store.put(text)
    head = max(0, cap - 200)
    keep_head, keep_tail = head * 2 // 3, head - head * 2 // 3
    return (text[:keep_head] + f"\n[... {len(text) - keep_head - keep_tail} characters cut; "
            f"full text: artifact {key[:16]} ...]\n" + text[len(text) - keep_tail:], key)
