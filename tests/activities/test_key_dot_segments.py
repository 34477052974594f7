"""A key's destination is checked on the path the HTTP client sends: it resolves `.` and `..` before it
sends (`https://api.openai.com/v1/../../x` goes out as `/x`), and a proxy or server in front of an
endpoint may decode `%2e%2e` and resolve it too, so a path holding a dot segment, written or encoded,
is no destination for a key."""
from __future__ import annotations

import pytest

from activities.model import may_send


@pytest.fixture
def gateway(monkeypatch):
    monkeypatch.setenv("MARATHON_MODEL_KEYS", "TEAM_A_KEY=https://gateway.example/team-a/v1")


@pytest.mark.parametrize("url", [
    "https://api.openai.com/v1/../../", "https://api.openai.com/v1/..", "https://api.openai.com/v1/./../evil/",
    "https://api.openai.com/v1/%2e%2e/%2E%2E/evil/", "https://api.openai.com/v1/..%2f..%2fevil/",
    "https://api.openai.com/v1/%252e%252e/evil/", "https://api.openai.com/v1\\..\\..\\evil/",
    "https://api.openai.com/v1/.%2e/",
])
def test_a_dot_segment_in_the_path_is_refused_for_the_default_key(url, monkeypatch):
    monkeypatch.delenv("MARATHON_MODEL_KEYS", raising=False)
    assert not may_send("OPENAI_API_KEY", url)


@pytest.mark.parametrize("url", [
    "https://gateway.example/team-a/v1/../../team-b/", "https://gateway.example/team-a/v1/%2e%2e/%2e%2e/team-b/",
    "https://gateway.example/team-a/v1/..%2F..%2Fteam-b/", "https://gateway.example/team-a/v1/./",
])
def test_a_path_scoped_allowance_is_not_left_through_dots(url, gateway):
    assert not may_send("TEAM_A_KEY", url)


@pytest.mark.parametrize("url", ["https://gateway.example/team-a/v1", "https://gateway.example/team-a/v1/",
                                 "https://gateway.example/team-a/v1/models...x/",
                                 "https://gateway.example/team-a/v1/.well/"])
def test_dots_inside_a_segment_are_no_dot_segment(url, gateway):
    assert may_send("TEAM_A_KEY", url)
    assert not may_send("TEAM_A_KEY", url.replace("team-a", "team-b"))
