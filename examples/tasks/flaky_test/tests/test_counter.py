import threading
import unittest

from src.counter import Counter


class CounterTest(unittest.TestCase):
    def test_threads_add_up(self):
        counter = Counter()

        def work():
            for _ in range(200):
                counter.add()

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(counter.total, 800)
