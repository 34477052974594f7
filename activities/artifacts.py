"""The artifact store: big things (full verdicts, long logs, kernel sources over the inline cap, the lab
notebook) in a directory, keyed by the SHA-256 of their content. History keeps only the key.

The directory is the worker's choice (`worker.py --artifacts DIR`, or MARATHON_ARTIFACTS); workers on
several hosts should share one (an NFS path, a mounted bucket)."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

DEFAULT_ROOT = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "kernel-marathon" / "artifacts"


def default_root() -> Path:
    return Path(os.environ.get("MARATHON_ARTIFACTS") or DEFAULT_ROOT)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ArtifactStore:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise KeyError(f"not an artifact key: {key!r}")
        return self.root / "sha256" / key[:2] / key

    def put(self, text: str) -> str:
        """Store `text`; idempotent (a retried activity writes the same file again, harmlessly)."""
        key = sha256_text(text)
        path = self.path(key)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
        return key

    def get(self, key: str) -> str:
        try:
            return self.path(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise KeyError(f"artifact {key} is not in {self.root}") from None

    def has(self, key: str) -> bool:
        return self.path(key).exists()

    def notebook_path(self, workflow_id: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in workflow_id)
        return self.root / "notebooks" / f"{safe}.md"

    def append_notebook(self, workflow_id: str, line: str) -> Path:
        path = self.notebook_path(workflow_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")
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
