"""Reading a file a user names on the command line (a problem, a kernel, a patch, a run's report): a
regular file only, of a bounded size, UTF-8; anything else is one line naming the flag and the file.
Without the checks a path to /dev/zero or a FIFO is read for ever, and a huge file fills the memory."""
from __future__ import annotations

import os
import stat

MAX_SOURCE_BYTES = 4 * 2**20  # a problem, a kernel or a patch
MAX_REPORT_BYTES = 16 * 2**20  # a run's report (--memory-from)


class UserFileError(ValueError):
    """A named file that cannot be read as asked: its message is the one line to show."""


def read_text(path: str | os.PathLike, what: str, max_bytes: int = MAX_SOURCE_BYTES) -> str:
    """The text of the regular file at `path`, at most `max_bytes` long; `what` names it in an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UserFileError(f"{what} {str(path)!r}: cannot open it ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UserFileError(f"{what} {str(path)!r}: not a regular file")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UserFileError(f"{what} {str(path)!r}: larger than {max_bytes // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserFileError(f"{what} {str(path)!r}: not UTF-8 text (byte {exc.start})") from None
