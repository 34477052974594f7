"""The tuner policy as a pure function: it never repeats a configuration, covers the whole space, climbs
toward what measured faster, and steers away from knob values that failed."""
from __future__ import annotations

import itertools

from workflows.models import TunerTrial
from workflows.tuner import FULL_ENUMERATION_LIMIT, config_key, incumbent, next_config, space_size

TUN = {"BLOCK_S": [8, 16, 32, 64], "num_warps": [2, 4, 8]}
START = {"BLOCK_S": 16, "num_warps": 4}


def drive(tunables, start, measure, limit=10_000):
    """Run the policy to exhaustion against `measure(config) -> (status, latency)`."""
    trials = [TunerTrial(key=config_key(start), config=start, status="ok", latency_us=measure(start)[1])]
    while len(trials) < limit:
        cfg = next_config(tunables, trials, start)
        if cfg is None:
            break
        status, lat = measure(cfg)
        trials.append(TunerTrial(key=config_key(cfg), config=cfg, status=status, latency_us=lat))
    return trials


def bowl(cfg):  # fastest at BLOCK_S=64, num_warps=8
    return "ok", abs(cfg["BLOCK_S"] - 64) + 3 * abs(cfg["num_warps"] - 8) + 10.0


def test_covers_the_space_without_repeats():
    trials = drive(TUN, START, bowl)
    keys = [t.key for t in trials]
    assert len(keys) == len(set(keys)) == space_size(TUN) == 12
    assert next_config(TUN, trials, START) is None


def test_climbs_toward_the_fastest():
    trials = drive(TUN, START, bowl)
    first = [t.config for t in trials[:6]]
    assert {"BLOCK_S": 64, "num_warps": 8} in first  # found within 5 steps of a 12-point space
    assert incumbent(trials, START)[0] == {"BLOCK_S": 64, "num_warps": 8}
    # every step moves from the incumbent of its time by one index step while a neighbour is untried
    for i in range(1, 4):
        inc, _ = incumbent(trials[:i], START)
        moved = sum(abs(TUN[k].index(trials[i].config[k]) - TUN[k].index(inc[k])) for k in TUN)
        assert moved == 1


def test_failed_values_go_last():
    def measure(cfg):
        if cfg["BLOCK_S"] == 8:
            return "compile_error", None
        return bowl(cfg)

    trials = drive(TUN, START, measure)
    failing = [i for i, t in enumerate(trials) if t.config["BLOCK_S"] == 8]
    assert len(failing) == 3
    # after the first failure at BLOCK_S=8 the other two are the last ones tried
    assert failing[1:] == [len(trials) - 2, len(trials) - 1]


def test_momentum_keeps_going_the_way_that_worked():
    tun = {"A": list(range(10)), "B": [0, 1]}
    start = {"A": 2, "B": 0}
    trials = drive(tun, start, lambda c: ("ok", 100.0 - 5 * c["A"] + c["B"]), limit=8)
    assert [t.config["A"] for t in trials[:8]] == [2, 1, 3, 4, 5, 6, 7, 8]


def test_huge_spaces_search_the_neighbourhood():
    tun = {f"k{i}": list(range(8)) for i in range(7)}  # 8^7 = 2M configurations
    assert space_size(tun) > FULL_ENUMERATION_LIMIT
    start = {k: 3 for k in tun}
    trials = drive(tun, start, lambda c: ("ok", float(sum(c.values()))), limit=20)
    keys = [t.key for t in trials]
    assert len(keys) == len(set(keys)) == 20
    assert incumbent(trials, start)[1].latency_us < 21.0  # it went downhill from 21


def test_values_outside_the_declared_lists_are_kept_apart():
    tun = {"NUM_SPLITS": ["auto", 1, 2, 4]}
    start = {"NUM_SPLITS": "auto"}
    trials = drive(tun, start, lambda c: ("ok", 1.0))
    assert sorted(str(t.config["NUM_SPLITS"]) for t in trials) == ["1", "2", "4", "auto"]
    # configs carry every knob of the start, even ones without declared values
    start2 = {"A": 1, "fixed": "x"}
    trials = drive({"A": [1, 2]}, start2, lambda c: ("ok", 1.0))
    assert all(t.config["fixed"] == "x" for t in trials) and len(trials) == 2


def test_deterministic():
    a = drive(TUN, START, bowl)
    b = drive(TUN, START, bowl)
    assert [t.key for t in a] == [t.key for t in b]
    assert all(dict(zip(TUN, v)) for v in itertools.product(*TUN.values()))


def test_ranks_by_speedup_when_every_profile_has_one():
    a = TunerTrial(key="a", config={"BLOCK_S": 8, "num_warps": 4}, status="ok", latency_us=10.0, speedup=1.0)
    b = TunerTrial(key="b", config={"BLOCK_S": 16, "num_warps": 4}, status="ok", latency_us=12.0, speedup=1.5)
    assert incumbent([a, b], START)[1] is b  # the baseline ran slower in b's measurement: speedup decides
    c = TunerTrial(key="c", config={"BLOCK_S": 32, "num_warps": 4}, status="ok", latency_us=11.0)
    assert incumbent([a, b, c], START)[1] is a  # not every profile has a speedup: latency decides
