"""The tensor file in which outputs and references cross to the judge (kernels/evaluator/tensor_file.py):
what the writer writes reads back as it was; anything else an untrusted writer could leave is refused,
before the judge allocates more than it asked for."""
import json
import os
import threading

import pytest
import torch

from kernels.evaluator import tensor_file
from kernels.evaluator.tensor_file import NotAFile, TensorFileDefect


@pytest.mark.parametrize("t", [
    torch.arange(12, dtype=torch.float32).reshape(3, 4),
    torch.randn(2, 3, 4).to(torch.bfloat16),
    torch.randn(5).half(),
    torch.randn(2, 2, dtype=torch.float64),
    torch.tensor([True, False, True]),
    torch.tensor(3.5),  # 0-dim
    torch.zeros(0, 5, dtype=torch.int64),  # empty
    torch.arange(-5, 5, dtype=torch.int8),
    torch.arange(7, dtype=torch.int16),
    torch.arange(7, dtype=torch.int32),
    torch.arange(256, dtype=torch.uint8),
    torch.randn(3, dtype=torch.complex64),
    torch.arange(40, dtype=torch.float32).reshape(5, 8)[1:4, ::3],  # a non-contiguous view
    torch.randn(3, dtype=torch.complex64).conj(),  # a lazily conjugated view
    torch.randn(3, 3, requires_grad=True),
], ids=lambda t: f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}")
def test_round_trip(tmp_path, t):
    path = tmp_path / "t.pt"
    tensor_file.write(t, path)
    want = t.detach().resolve_conj()
    nbytes = want.numel() * want.element_size()
    head = json.dumps({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}).encode() + b"\n"
    assert path.stat().st_size == len(head) + nbytes and path.read_bytes().startswith(head)
    out = tensor_file.read(path, nbytes)
    assert out.dtype == t.dtype and out.shape == t.shape and out.device.type == "cpu"
    assert torch.equal(out, want) and out.is_contiguous()
    assert out.untyped_storage().nbytes() == nbytes  # its own bytes, never a view of a bigger storage


def test_a_view_is_written_as_its_own_bytes(tmp_path):
    big = torch.zeros(2**20)
    tensor_file.write(big[:12].view(3, 4), tmp_path / "v.pt")
    assert (tmp_path / "v.pt").stat().st_size < 100


def test_the_writer_refuses_what_the_reader_would(tmp_path):
    with pytest.raises(ValueError):
        tensor_file.write(torch.zeros(3, dtype=torch.complex128), tmp_path / "c.pt")


def _raw(path, header, payload=b"") -> None:
    path.write_bytes((header if isinstance(header, bytes) else json.dumps(header).encode()) + b"\n" + payload)


def _defect(path, max_bytes=2**20) -> str:
    with pytest.raises(TensorFileDefect) as caught:
        tensor_file.read(path, max_bytes)
    assert caught.value.reason == str(caught.value) and caught.value.reason[0].islower()
    return caught.value.reason


@pytest.mark.parametrize("header, says", [
    (b"not json", "not ASCII JSON"),
    (b'{"dtype": "float32", "shape": [1], "x": 1}', "not exactly"),  # an extra key
    (b'{"dtype": "float32"}', "not exactly"),
    (b'[1, 2]', "not exactly"),
    (b'{"dtype": "float32", "dtype": "int8", "shape": [1]}', "repeated key"),
    (b'{"dtype": "float32", "shape": [NaN]}', "not ASCII JSON"),
    ('{"dtype": "float32", "shape": [1], "\u00e9": 1}'.encode(), "not ASCII JSON"),
    (b'{"dtype": "float8_e4m3fn", "shape": [1]}', "not a plain numeric"),
    (b'{"dtype": "complex128", "shape": [1]}', "not a plain numeric"),
    (b'{"dtype": "Tensor", "shape": [1]}', "not a plain numeric"),
    (b'{"dtype": 7, "shape": [1]}', "not a plain numeric"),
    (b'{"dtype": "float32", "shape": [-1]}', "not an integer from 0"),
    (b'{"dtype": "float32", "shape": [true]}', "not an integer from 0"),
    (b'{"dtype": "float32", "shape": [1.0]}', "not an integer from 0"),
    (b'{"dtype": "float32", "shape": [1099511627777, 0]}', "not an integer from 0"),  # 2**40 + 1
    (b'{"dtype": "float32", "shape": "3"}', "not a list"),
    (b'{"dtype": "float32", "shape": [' + b", ".join([b"1"] * 17) + b"]}", "not a list of at most 16"),
    (b'{"dtype": "float32", "shape": [1099511627776, 1099511627776]}', "claims 4835703278458516698824704 bytes"),
    (b'{"dtype": "uint8", "shape": [1048577]}', "claims 1048577 bytes where at most 1048576"),
], ids=["not-json", "extra-key", "missing-key", "not-an-object", "repeated-key", "nan", "not-ascii", "float8",
        "complex128", "not-a-dtype", "dtype-not-a-string", "negative-dim", "bool-dim", "float-dim", "huge-dim",
        "shape-not-a-list", "too-many-dims", "huge-product", "over-max-bytes"])
def test_a_bad_header_is_a_defect(tmp_path, header, says):
    path = tmp_path / "t.pt"
    _raw(path, header, b"\0" * 4)
    assert says in _defect(path)


def test_the_header_line_ends_within_its_bound(tmp_path):
    path = tmp_path / "t.pt"
    path.write_bytes(b" " * 5000 + b'{"dtype": "float32", "shape": []}\n' + b"\0" * 4)
    assert "no header line within its first 4096 bytes" in _defect(path)
    path.write_bytes(b'{"dtype": "float32", "shape": []}')  # no newline at all
    assert "no header line" in _defect(path)
    path.write_bytes(b"")
    assert "no header line" in _defect(path)
    head = b'{"dtype": "float32", "shape": []}'
    path.write_bytes(b" " * (4095 - len(head)) + head + b"\n" + b"\0" * 4)  # 4096 bytes with its newline: fine
    assert tensor_file.read(path, 4).shape == ()


def test_the_file_size_must_be_the_headers_exactly(tmp_path):
    path = tmp_path / "t.pt"
    header = {"dtype": "float32", "shape": [3, 4]}
    head = len(json.dumps(header)) + 1
    _raw(path, header, b"\0" * 47)
    assert f"is {head + 47} bytes long where its header says {head + 48}" in _defect(path)
    _raw(path, header, b"\0" * 49)
    assert f"is {head + 49} bytes long where its header says {head + 48}" in _defect(path)
    _raw(path, header, b"\0" * 48 + b"\n" + b"\0" * 2**20)
    assert "bytes long where its header says" in _defect(path)
    _raw(path, header, b"\0" * 48)
    assert torch.equal(tensor_file.read(path, 48), torch.zeros(3, 4))


def test_the_payload_is_bounded_by_max_bytes_before_anything_is_allocated(tmp_path):
    path = tmp_path / "t.pt"
    tensor_file.write(torch.zeros(3, 4), path)
    assert tensor_file.read(path, 48).shape == (3, 4)
    assert "claims 48 bytes where at most 47 were asked for" in _defect(path, 47)
    _raw(path, {"dtype": "float64", "shape": [2**30, 2**10]})  # 8 TiB claimed by a file of 40 bytes
    assert "claims 8796093022208 bytes" in _defect(path)


def test_only_a_regular_file_is_read(tmp_path):
    real = tmp_path / "real.pt"
    tensor_file.write(torch.zeros(3), real)
    link = tmp_path / "link.pt"
    link.symlink_to(real)
    with pytest.raises(OSError):  # not followed: it could point the judge at a file of its own
        tensor_file.read(link, 2**20)
    with pytest.raises(NotAFile, match="is not a regular file"):
        tensor_file.read(tmp_path, 2**20)
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    result = []

    def read():  # a FIFO with no writer would block a plain open forever
        try:
            tensor_file.read(fifo, 2**20)
        except NotAFile as exc:
            result.append(exc.reason)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock it before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("reading a FIFO hung")
    assert result == ["is not a regular file"]
    with pytest.raises(OSError):
        tensor_file.read(tmp_path / "missing.pt", 2**20)


def test_a_boolean_byte_other_than_0_or_1_is_a_defect(tmp_path):
    """A bool tensor holding byte 2 compares as neither True nor False, depending on the kernel."""
    path = tmp_path / "t.pt"
    _raw(path, {"dtype": "bool", "shape": [3]}, b"\x01\x00\x02")
    assert "neither 0 nor 1" in _defect(path)
    _raw(path, {"dtype": "bool", "shape": [3]}, b"\x01\x00\x01")
    assert torch.equal(tensor_file.read(path, 3), torch.tensor([True, False, True]))
