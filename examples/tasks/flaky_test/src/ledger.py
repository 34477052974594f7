"""Totals per account, kept in order of first use."""


class Ledger:
    def __init__(self) -> None:
        self.accounts: dict[str, int] = {}

    def post(self, account: str, amount: int) -> int:
        self.accounts[account] = self.accounts.get(account, 0) + amount
        return self.accounts[account]

    def balance(self, account: str) -> int:
        return self.accounts.get(account, 0)
