"""The MARATHON_* switches: one model (kernels/settings.py), read where they are used, a bad value one line
naming the variable, and one table (docs/settings.md) that cannot drift from the model."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.settings import FENCE_SWITCHES, INTERNAL, Settings, SettingsError, markdown_table, settings, variable

ROOT = Path(__file__).resolve().parents[2]
# What ships, is documented, tests it or runs its CI: every MARATHON_* name in it must be declared in
# kernels/settings.py, and read through it.
PRODUCT = ["kernels", "activities", "workflows", "compaction", "reports", "cli", "serving", "tasks", "bench", "deploy",
           "docs", "tests", ".ci", "worker.py", "marathon.py", "README.md"]
NAME = re.compile(r"\bMARATHON_[A-Z0-9_]*[A-Z0-9]")
SUFFIXES = (".py", ".md", ".sh", ".toml", ".service", ".j2", ".jinja", ".yml", ".yaml", "")


def _product_files():
    for entry in PRODUCT:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            if f.suffix in SUFFIXES and "__pycache__" not in f.parts:
                yield f


def test_the_table_is_the_model():
    assert (ROOT / "docs" / "settings.md").read_text() == markdown_table(), \
        "docs/settings.md is stale: python -m kernels.settings > docs/settings.md"


def test_every_marathon_name_is_declared_once():
    declared = {variable(f) for f in Settings.model_fields} | set(INTERNAL)
    assert not {variable(f) for f in Settings.model_fields} & set(INTERNAL)
    found: dict[str, set[str]] = {}
    for f in _product_files():
        for name in NAME.findall(f.read_text(errors="replace")):
            found.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    undeclared = {n: sorted(fs)[:3] for n, fs in found.items() if n not in declared}
    assert not undeclared, f"MARATHON_* names not in kernels/settings.py: {undeclared}"
    assert set(FENCE_SWITCHES.values()) <= declared


def test_switches_are_read_only_through_the_model():
    """No reader of its own: os.environ.get / os.getenv / os.environ[...] reads of a MARATHON_ name."""
    read = re.compile(r"""(environ\.get|getenv)\(\s*f?["']MARATHON_|environ\[\s*f?["']MARATHON_[A-Z_]*["']\s*\](?!\s*=[^=])""")
    offenders = [f"{f.relative_to(ROOT)}:{i}" for f in _product_files() if f.suffix == ".py"
                 for i, line in enumerate(f.read_text().splitlines(), 1)
                 if read.search(line) and not line.strip().startswith("del ")]
    assert not offenders, offenders


def test_defaults_types_and_bounds():
    s = settings({})
    assert s.sandbox_seccomp and s.warm_judges and not s.unsafe_skip_policy and s.sandbox_seal == "on"
    assert s.sandbox_memory_bytes("cpu") == 12 * 2**30 and s.sandbox_memory_bytes("cuda") == 48 * 2**30
    s = settings({"MARATHON_SANDBOX_SECCOMP": " Off ", "MARATHON_WARM_JUDGES": "0", "MARATHON_SANDBOX_SEAL": "0",
                  "MARATHON_SANDBOX_DISK": str(2**30), "MARATHON_BASELINE_TTL_S": "0", "MARATHON_ARTIFACTS": ""})
    assert not s.sandbox_seccomp and not s.warm_judges and s.sandbox_seal == "off"
    assert s.sandbox_disk == 2**30 and s.baseline_ttl_s == 0 and s.artifacts is None  # empty: unset
    assert settings({"MARATHON_SANDBOX_SEAL": "REPORT"}).sandbox_seal == "report"


@pytest.mark.parametrize("name,value,words", [
    ("MARATHON_SANDBOX_SECCOMP", "disable", "valid boolean"),
    ("MARATHON_SANDBOX_DISK", "4G", "valid integer"),
    ("MARATHON_SANDBOX_DISK", "1", "greater than or equal"),
    ("MARATHON_BASELINE_TTL_S", "nan", "finite"),
    ("MARATHON_GPU_QUIET_WAIT_S", "1e12", "less than or equal"),
    ("MARATHON_SANDBOX_GPU_FRACTION", "0", "greater than 0"),
    ("MARATHON_SANDBOX_SEAL", "maybe", "'on', 'off' or 'report'"),
    ("MARATHON_TEST_DEVICE_PROFILE", "H200:fast", "name:bytes_per_s:flops_per_s"),
    ("MARATHON_TEMPORAL_API_KEY_ENV", "MY KEY", "should match pattern"),
])
def test_a_bad_value_is_one_line_naming_the_variable(name, value, words):
    with pytest.raises(SettingsError) as err:
        settings({name: value})
    text = str(err.value)
    assert text.startswith(f"{name}={value!r}: ") and words in text and "\n" not in text


def test_read_at_the_point_of_use(monkeypatch):
    monkeypatch.setenv("MARATHON_SANDBOX_MAX_PROCESSES", "15")
    assert settings().sandbox_max_processes == 15
    monkeypatch.setenv("MARATHON_SANDBOX_MAX_PROCESSES", "17")
    assert settings().sandbox_max_processes == 17


def test_the_temporal_connection_is_read_through_the_model(monkeypatch, tmp_path):
    """worker.connect's TLS files and API key variable: none set is plain TCP; a key alone is TLS with the
    system's roots; a client certificate needs its key; the files are read as the variables name them."""
    import worker

    for name in ("MARATHON_TEMPORAL_TLS_CA", "MARATHON_TEMPORAL_TLS_CERT", "MARATHON_TEMPORAL_TLS_KEY",
                 "MARATHON_TEMPORAL_API_KEY_ENV"):
        monkeypatch.delenv(name, raising=False)
    assert worker._tls_and_key() == (False, None)
    monkeypatch.setenv("MARATHON_TEMPORAL_API_KEY_ENV", "MARATHON_TEST_KEY")
    monkeypatch.setenv("MARATHON_TEST_KEY", "tc-key")
    assert worker._tls_and_key() == (True, "tc-key")
    (tmp_path / "ca.pem").write_bytes(b"ca")
    (tmp_path / "cert.pem").write_bytes(b"cert")
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_CA", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_CERT", str(tmp_path / "cert.pem"))
    with pytest.raises(RuntimeError, match="go together"):
        worker._tls_and_key()
    (tmp_path / "key.pem").write_bytes(b"key")
    monkeypatch.setenv("MARATHON_TEMPORAL_TLS_KEY", str(tmp_path / "key.pem"))
    tls, key = worker._tls_and_key()
    assert (tls.server_root_ca_cert, tls.client_cert, tls.client_private_key, key) == (b"ca", b"cert", b"key", "tc-key")


@pytest.mark.parametrize("command", [[sys.executable, "marathon.py", "runs", "--address", "127.0.0.1:9"],
                                     [sys.executable, "worker.py", "--address", "127.0.0.1:9"]])
def test_entry_points_refuse_a_bad_value_in_one_line(command):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MARATHON_SANDBOX_MAX_PROCESSES": "lots"}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "MARATHON_SANDBOX_MAX_PROCESSES='lots'" in lines[0], proc.stderr
