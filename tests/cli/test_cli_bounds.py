"""Bad input at the CLI's door: a malformed address, id, name, namespace, task queue, age or schedule is
one line and exit 2 while the arguments are read, by every command that takes it; and a request the
Temporal server refuses (a bad cron expression, an id or a namespace it does not know) is one line and
exit 2, never a traceback."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from marathon import main
from marathon_support import ROOT

pytestmark = pytest.mark.timeout(180)
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

BAD_ADDRESSES = ["[zz]:17933", "[]:17933", "[::1]]:17933", "[1::2::3]:17933", "::1:7233", "[fe80::1%eth0]:7233",
                 "999.1.1.1:7233", "host.1:7233", "a b:7233", "x" * 300 + ":7233"]
# every command that takes --address (and what else it needs to get as far as reading it)
ADDRESS_COMMANDS = [
    ["run", "--problem", "mla_decode"],
    ["run", "--problem", "mla_decode", "--detach"],
    ["follow", "--workflow-id", "x"],
    ["suite", "--problems", "docs/examples"],
    ["schedule", "list"],
    ["schedule", "create", "--id", "x", "--problem", "mla_decode"],
    ["schedule", "delete", "--id", "x"],
    ["runs"],
    ["report", "x"],
]


def refused(argv: list[str], capsys) -> str:
    """`marathon ARGV` in this process: it must stop while reading its arguments, exit 2, one line."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
@pytest.mark.parametrize("argv", ADDRESS_COMMANDS, ids=lambda a: "-".join(a[:2]))
def test_a_malformed_address_is_refused_by_every_command(argv, address, capsys):
    assert "--address" in refused([*argv, "--address", address], capsys)


@pytest.mark.parametrize("address", ["localhost:7233", "127.0.0.1:1", "[::1]:7233", "my_host.example.com:443",
                                     "temporal-frontend.ns.svc.cluster.local:7233"])
def test_a_well_formed_address_is_taken(address):
    from cli.args import ADDRESS
    assert ADDRESS(address) == address


def test_an_address_taken_is_one_the_client_parses():
    """What ADDRESS lets through reaches the network: the client fails to connect, it does not fail to
    parse the URL (a ValueError, the traceback this check prevents)."""
    import asyncio

    import worker
    for address in ("[::1]:1", "127.0.0.1:1", "my_host.invalid:1"):
        with pytest.raises(RuntimeError):
            asyncio.run(asyncio.wait_for(worker.connect(address), 30))


LONG = "a" * 5000


@pytest.mark.parametrize("argv, flag", [
    (["schedule", "create", "--id", LONG, "--problem", "mla_decode"], "--id"),
    (["schedule", "create", "--id", "", "--problem", "mla_decode"], "--id"),
    (["schedule", "create", "--id", "a/b", "--problem", "mla_decode"], "--id"),
    (["schedule", "create", "--id", "x", "--task-queue", "", "--problem", "mla_decode"], "--task-queue"),
    (["schedule", "create", "--id", "x", "--gpu-task-queue", "a b", "--problem", "mla_decode"], "--gpu-task-queue"),
    (["schedule", "delete", "--id", ""], "--id"),
    (["schedule", "list", "--namespace", "no/such"], "--namespace"),
    (["schedule", "list", "--namespace", LONG], "--namespace"),
    (["runs", "--namespace", ""], "--namespace"),
    (["runs", "--problem", "x'y"], "--problem"),
    (["runs", "--since", "99999999999999w"], "--since"),
    (["runs", "--since", "1" * 400 + "w"], "--since"),
    (["runs", "--since", "3650.1d"], "--since"),
    (["runs", "--since", "soon"], "--since"),
    (["report", ""], "workflow_id"),
    (["report", LONG], "workflow_id"),
    (["report", "x", "--namespace", ""], "--namespace"),
    (["follow", "--workflow-id", ""], "--workflow-id"),
    (["follow", "--workflow-id", "x", "--namespace", "a b"], "--namespace"),
    (["run", "--problem", "mla_decode", "--workflow-id", "\n"], "--workflow-id"),
    (["run", "--problem", "mla_decode", "--task-queue", LONG], "--task-queue"),
    (["run", "--problem", "mla_decode", "--namespace", ""], "--namespace"),
    (["suite", "--problems", "docs/examples", "--workflow-id", ""], "--workflow-id"),
    (["suite", "--problems", "docs/examples", "--namespace", "no/such"], "--namespace"),
])
def test_an_id_or_name_out_of_bounds_is_refused(argv, flag, capsys):
    line = refused(argv, capsys)
    assert flag in line and len(line) < 400, line


@pytest.mark.parametrize("cron", ["not a cron", "@every 1s", "@every 59m", "@every 1d", "* * * * *", "*/5 * * * *",
                                  "0,30 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 * 13 *", "0 5-1 * * *",
                                  "0 */0 * * *", "0 0 * * * *", "@every 9000h", "", "x" * 5000])
def test_a_schedule_more_often_than_hourly_or_malformed_is_refused(cron, capsys):
    line = refused(["schedule", "create", "--id", "x", "--problem", "mla_decode", "--cron", cron], capsys)
    assert "--cron" in line and len(line) < 400, line


@pytest.mark.parametrize("cron", ["0 22 * * *", "@daily", "@hourly", "@weekly", "@every 1h", "@every 90m",
                                  "@every 1h30m", "30 */6 * * MON-FRI", "0 0 1 jan *", "0 9-17 * * 1-5",
                                  "5 */2 * * *", "0 0 1-31/2 * *"])
def test_a_schedule_an_hour_apart_or_more_is_taken(cron):
    from cli.schedule import CRON
    assert CRON(cron) == " ".join(cron.split())


def marathon(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "marathon.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=ENV)


def one_line_exit_2(res: subprocess.CompletedProcess, *words: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res
    assert all(w in lines[0] for w in words), lines[0]


def test_what_the_server_refuses_is_one_line_and_exit_2(temporal_server):
    """Against a real server: the ids and the namespace it does not know are one line and exit 2."""
    address = temporal_server.address
    sid = f"bounds-{uuid.uuid4().hex[:8]}"
    one_line_exit_2(marathon("schedule", "delete", "--id", sid, "--address", address), "no schedule", sid)
    one_line_exit_2(marathon("schedule", "list", "--namespace", "no-such-namespace", "--address", address),
                    "refused", "not_found")
    one_line_exit_2(marathon("schedule", "create", "--id", sid, "--problem", "mla_decode", "--namespace",
                             "no-such-namespace", "--address", address), "not_found")
    one_line_exit_2(marathon("runs", "--namespace", "no-such-namespace", "--address", address), "not_found")
    one_line_exit_2(marathon("report", f"no-such-run-{sid}", "--address", address), "no run")


def test_a_refusal_at_the_boundary_is_one_line(capsys, monkeypatch):
    """An RPCError the request caused, wherever a command meets it, is one line and exit 2; an error of
    another kind keeps its traceback (it is a bug to find)."""
    import argparse

    import marathon
    from temporalio.service import RPCError, RPCStatusCode

    def raising(exc):
        def parse(argv=None):
            def func(args):
                raise exc
            return argparse.Namespace(command="report", address="h:1", func=func)
        return lambda: argparse.Namespace(parse_args=parse)

    refusal = RPCError("WorkflowId is not set.", RPCStatusCode.INVALID_ARGUMENT, b"")
    monkeypatch.setattr(marathon, "build_parser", raising(refusal))
    assert marathon.main([]) == 2
    assert capsys.readouterr().err == ("marathon report: the server at h:1 refused the request (invalid_argument): "
                                       "WorkflowId is not set.\n")
    monkeypatch.setattr(marathon, "build_parser", raising(KeyError("a bug")))
    with pytest.raises(KeyError):
        marathon.main([])


@pytest.mark.parametrize("argv", [a for a in ADDRESS_COMMANDS if a[0] != "run"], ids=lambda a: "-".join(a[:2]))
def test_a_server_that_does_not_answer_is_one_line_and_exit_2(argv):
    """Nothing listens at the address: every command that talks to the server says so in one line and
    exits 2 (the address is the input at fault), never a traceback, never 0. (`follow` waits out a
    server's restart for --server-wait seconds first, saying so on a line of its own.)"""
    if argv[0] == "follow":
        res = marathon(*argv, "--server-wait", "1", "--address", "127.0.0.1:1")
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and "Traceback" not in res.stderr, res
        assert "waiting up to 1 s" in lines[0] and "did not answer for 1 s" in lines[-1] and len(lines) == 2, lines
        return
    one_line_exit_2(marathon(*argv, "--address", "127.0.0.1:1"), "cannot reach", "127.0.0.1:1")


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return str(path)


@pytest.mark.parametrize("argv, flag", [
    (["dev", "--state-dir", "{file}"], "--state-dir"),
    (["dev", "--artifacts", "{file}/below"], "--artifacts"),
    (["dev", "--ip", "999.1.1.1"], "--ip"),
    (["dev", "--ip", "a b"], "--ip"),
    (["dev", "--gpus", "abc"], "--gpus"),
    (["dev", "--gpus", "-1"], "--gpus"),
    (["dev", "--gpus", "0,0"], "--gpus"),
    (["dev", "--gpus", "1e308"], "--gpus"),
    (["run", "--problem", "mla_decode", "--state-dir", "{file}"], "--state-dir"),
    (["run", "--problem", "mla_decode", "--artifacts", "{file}"], "--artifacts"),
    (["runs", "--state-dir", "{file}"], "--state-dir"),
    (["report", "x", "--artifacts", "{file}"], "--artifacts"),
])
def test_a_folder_a_listening_address_or_a_gpu_list_is_checked_before_anything_starts(argv, flag, a_file, capsys):
    """Refused while the arguments are read: not after a server started (a state folder that is a file
    failed there with a traceback), nor as a worker's GPU list nobody could use."""
    line = refused([a.replace("{file}", a_file) for a in argv], capsys)
    assert flag in line and len(line) < 400, line


@pytest.mark.parametrize("path", ["/dev/zero", "/proc/self/environ", "{dir}", "{big}", "{binary}"])
def test_a_file_named_on_the_command_line_is_read_bounded(path, tmp_path, capsys):
    """--memory-from, --kernel, --problem: a regular UTF-8 file of bounded size, or one line and exit 2
    (/dev/zero used to be read until the memory ran out)."""
    (tmp_path / "big.json").write_bytes(b" " * (17 * 2**20))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    path = path.format(dir=tmp_path, big=tmp_path / "big.json", binary=tmp_path / "binary.json")
    for argv in (["run", "--problem", "mla_decode", "--memory-from", path, "--address", "127.0.0.1:1"],
                 ["run", "--problem", "mla_decode", "--kernel", path, "--address", "127.0.0.1:1"],
                 ["eval", "--problem", path, "--device", "cpu"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
