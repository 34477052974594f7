"""The candidate process's state check (kernels/evaluator/candidate_process.py, _digest): state a cache
could live in is seen wherever it is kept, and reading it runs none of the candidate's methods."""
import array
import collections
import itertools

import torch

from kernels.evaluator.candidate_process import _digest


def _changes(value, step) -> bool:
    before = _digest(value)
    step(value)
    return _digest(value) != before


def test_state_outside_plain_containers_is_seen():
    def keeper():
        last = None
        while True:
            new = yield last
            if new is not None:
                last = new
    gen = keeper()
    next(gen)
    cases = [
        ([1], lambda v: v.append(torch.zeros(1))),
        ({"a": 1}, lambda v: v.update(b=2)),
        ({1}, lambda v: v.add(2)),
        (collections.deque([1], maxlen=4), lambda v: v.append(2)),
        (array.array("i", [1]), lambda v: v.append(2)),
        (bytearray(b"ab"), lambda v: v.append(3)),
        (itertools.count(), next),
        (itertools.cycle([1, 2, 3]), next),
        (iter([1, 2, 3]), next),
        (gen, lambda v: v.send(torch.ones(1))),
    ]
    for value, step in cases:
        assert _changes(value, step), type(value).__name__
    still = itertools.repeat(1)
    assert not _changes(still, lambda v: None)


def test_no_method_of_the_candidates_runs_while_state_is_read():
    ran = []

    class Sneaky(list):
        def __iter__(self):
            ran.append("__iter__")
            return iter(())

        def __len__(self):
            ran.append("__len__")
            return 0

        def __repr__(self):
            ran.append("__repr__")
            return ""

    class Number(int):
        def __repr__(self):
            ran.append("int __repr__")
            return "0"

    value = Sneaky([1, 2])
    assert _changes(value, lambda v: list.append(v, 3))
    _digest({"n": Number(5)})
    assert ran == []
