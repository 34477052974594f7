import random
import unittest

from src.catalog import by_prefix, normalise, unique_codes


def _codes(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return [f" {rng.choice(letters)}{rng.choice(letters)} {rng.randrange(n // 2):05d} " for _ in range(n)]


class CatalogTest(unittest.TestCase):
    def test_normalise(self):
        self.assertEqual(normalise(" ab 001 "), "AB-001")

    def test_unique_keeps_first_order(self):
        self.assertEqual(unique_codes(["b 1", "a 1", "B 1", "c 2"]), ["B-1", "A-1", "C-2"])

    def test_unique_large(self):
        codes = _codes(5000, 1)
        got = unique_codes(codes)
        self.assertEqual(len(got), len(set(got)))
        self.assertEqual(set(got), {normalise(c) for c in codes})

    def test_groups(self):
        groups = by_prefix(_codes(4000, 2))
        self.assertTrue(all(all(c.startswith(p) for c in cs) for p, cs in groups.items()))
        self.assertEqual(sum(map(len, groups.values())), len(unique_codes(_codes(4000, 2))))
