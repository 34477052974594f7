import unittest

from src.ledger import Ledger


class LedgerTest(unittest.TestCase):
    def test_post_and_balance(self):
        ledger = Ledger()
        ledger.post("a", 5)
        ledger.post("a", -2)
        self.assertEqual(ledger.balance("a"), 3)
        self.assertEqual(ledger.balance("b"), 0)

    def test_order_of_first_use(self):
        ledger = Ledger()
        for name in ("z", "a", "z", "m"):
            ledger.post(name, 1)
        self.assertEqual(list(ledger.accounts), ["z", "a", "m"])
