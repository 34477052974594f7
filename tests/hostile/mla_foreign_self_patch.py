"""Patching through a foreign `self`: any function whose first parameter is called self may assign
self.<name>, so calling a method through its class with torch.cuda.Event as `self` (or a plain
function `def patch(self)`) replaces the event timer. Defence: attribute stores only on the first
parameter of a method of the candidate's own class, never rebound; the class itself is never a value
(so its methods cannot be called with another object); and stores may not take names torch's or
triton's objects have. Expected: rejected ("patching objects")."""
import torch
import triton
import triton.language as tl


class Clock:
    def fast(self):
        self.elapsed_time = lambda start, end: 0.001


def patch(self):
    self.elapsed_time = lambda start, end: 0.001


def mla_decode(q, kv, scale):
    Clock.fast(torch.cuda.Event)
    patch(torch.cuda.Event)
    return torch.zeros((q.shape[0], q.shape[1], 512), device=q.device, dtype=q.dtype)
