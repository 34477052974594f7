"""kernels/evaluator/timing.py pieces that run without a GPU: the L2 flush's two modes and the summary."""
import pytest
import torch

from kernels.evaluator.timing import L2Flush, summarize


def test_read_flush_reads_without_writing():
    flush = L2Flush("cpu", "read", nbytes=4096)
    flush.buf.fill_(3.0)  # a read flush must leave its buffer as it found it: no dirty lines
    flush()
    assert torch.all(flush.buf == 3.0)


def test_write_flush_writes_its_buffer():
    flush = L2Flush("cpu", "write", nbytes=4096)
    flush.buf.fill_(3.0)
    flush()
    assert torch.all(flush.buf == 0.0)


def test_unknown_flush_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="one of"):
        L2Flush("cpu", "evict")


def test_summarize_reports_spread():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median_us"], s["p10_us"], s["p90_us"], s["calls"]) == (3.0, 1.0, 5.0, 5)
