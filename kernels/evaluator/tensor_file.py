"""The file format in which a tensor crosses from an untrusted process (the candidate's, the problem
file's) to the judge: one ASCII JSON header line, {"dtype": "float32", "shape": [3, 4]}, then exactly
the tensor's bytes, contiguous, native (little-endian) order.

Not torch.save/torch.load: pickle and zip are an attack surface the judge does not need (a deflated
entry inflates to any size, a view keeps a vast storage), and at KernelBench's own sizes (a 6 GiB output)
torch.save is about 13x slower than a raw write. The writer runs in the untrusted process, where its
code may be replaced: everything here that matters is in `read`, which trusts nothing in the file."""
from __future__ import annotations

import json
import math
import os
import stat

import torch

MAX_HEADER = 4096  # bytes, its newline included
MAX_DIMS = 16
MAX_DIM = 2**40  # per dimension: no real tensor comes near it, and the product stays small
# plain numeric dtypes only: each a fixed number of bytes per element, any bytes a valid value
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.complex64)}
CHUNK = 2**30  # bytes per write/read call (Linux moves at most about 2 GiB per call)


class TensorFileDefect(ValueError):
    """What is wrong with a tensor file, as a short phrase that follows "the candidate's output X" or
    "saved a reference that"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotAFile(TensorFileDefect):
    """The path is not a regular file (a FIFO, a directory, a device): callers word it their own way."""


def write(t: torch.Tensor, path: str | os.PathLike) -> None:
    """`t`'s own bytes (detached, on the CPU, contiguous: a view is written as its values, not its
    storage), after the header line."""
    t = t.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if DTYPES.get(name) is not t.dtype or t.layout is not torch.strided:
        raise ValueError(f"a tensor file holds a plain numeric tensor, not a {t.layout} {t.dtype} one")
    header = json.dumps({"dtype": name, "shape": list(t.shape)}).encode("ascii") + b"\n"
    # a uint8 view of the same memory: no numpy dtype (it has no bfloat16), no copy
    data = memoryview(t.reshape(-1).view(torch.uint8).numpy())
    with open(path, "wb", buffering=0) as f:
        _write_all(f, header)
        for start in range(0, len(data), CHUNK):
            _write_all(f, data[start:start + CHUNK])


def _write_all(f, data) -> None:
    view = memoryview(data)
    while view:
        view = view[f.write(view):]


def read(path: str | os.PathLike, max_bytes: int) -> torch.Tensor:
    """The tensor in the file at `path`, on the CPU, its storage exactly its own bytes, at most
    `max_bytes` of them. Only a regular file, not through a link (it could point the judge at a file of
    its own), opened without blocking (a FIFO would hang the judge). Raises OSError where it cannot be
    opened or read, NotAFile, and TensorFileDefect for anything else about it."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile("is not a regular file")
        f = open(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise
    with f:
        size = st.st_size
        head = _read_header(f)
        dtype, shape = _parse(head)
        numel = math.prod(shape)
        nbytes = numel * dtype.itemsize
        if nbytes > max_bytes:
            raise TensorFileDefect(f"claims {nbytes} bytes where at most {max_bytes} were asked for")
        if size != len(head) + nbytes:  # too short would leave memory unwritten, too long is data unread
            raise TensorFileDefect(f"is {size} bytes long where its header says {len(head) + nbytes}")
        out = torch.empty(numel, dtype=dtype)  # fresh: its storage is exactly nbytes
        data = memoryview(out.view(torch.uint8).numpy())
        f.seek(len(head))
        done = 0
        while done < nbytes:
            got = f.readinto(data[done:done + CHUNK])
            if not got:  # the file shrank since fstat
                raise TensorFileDefect(f"ended after {len(head) + done} of {size} bytes")
            done += got
    if dtype is torch.bool and numel and int(out.view(torch.uint8).max()) > 1:  # any other byte is no bool:
        raise TensorFileDefect("holds a boolean that is neither 0 nor 1")  # comparisons of it are undefined
    return out.view(shape)


def _read_header(f) -> bytes:
    """The bytes up to and including the first newline, within MAX_HEADER."""
    head = b""
    while b"\n" not in head and len(head) < MAX_HEADER:
        more = f.read(MAX_HEADER - len(head))
        if not more:
            break
        head += more
    end = head.find(b"\n")
    if end < 0:
        raise TensorFileDefect(f"has no header line within its first {MAX_HEADER} bytes")
    return head[:end + 1]


def _parse(head: bytes) -> tuple[torch.dtype, list[int]]:
    def unique(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise TensorFileDefect("has a header with a repeated key")
        return dict(pairs)

    try:
        fields = json.loads(head.decode("ascii"), object_pairs_hook=unique, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise TensorFileDefect("has a header that is not ASCII JSON") from None
    if type(fields) is not dict or set(fields) != {"dtype", "shape"}:
        raise TensorFileDefect("has a header that is not exactly {dtype, shape}")
    dtype = DTYPES.get(fields["dtype"]) if type(fields["dtype"]) is str else None
    if dtype is None:
        raise TensorFileDefect(f"has a dtype that is not a plain numeric one ({str(fields['dtype'])[:40]!r})")
    shape = fields["shape"]
    if type(shape) is not list or len(shape) > MAX_DIMS:
        raise TensorFileDefect(f"has a shape that is not a list of at most {MAX_DIMS} sizes")
    if any(type(n) is not int or not 0 <= n <= MAX_DIM for n in shape):
        raise TensorFileDefect(f"has a shape with a size that is not an integer from 0 to {MAX_DIM}")
    return dtype, shape


def _no_constant(name: str):
    raise TensorFileDefect("has a header that is not ASCII JSON")
