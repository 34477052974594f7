"""A hit counter shared by worker threads."""
import random
import threading
import time

# Whether `add` holds the counter's lock while it reads and writes the total.
LOCKED = False


class Counter:
    def __init__(self) -> None:
        self.total = 0
        self._lock = threading.Lock()

    def _add(self, n: int) -> None:
        current = self.total
        if random.random() < 0.003:
            time.sleep(0.0005)  # a cache miss, a page fault, a busy machine: the thread pauses here
        self.total = current + n

    def add(self, n: int = 1) -> None:
        if LOCKED:
            with self._lock:
                self._add(n)
        else:
            self._add(n)
