"""The tuner's search: no model, pure and deterministic, so it runs inside the workflow (the `tuner`
policy, workflows/tuner_policy.py, writes and profiles what it proposes).

It explores the TUNABLES a kernel declares (kernels/problems/tunables.py) by hill-climbing on what it measures (1/speedup against the strongest baseline, else latency):
  - the incumbent is the fastest configuration profiled OK so far (the starting CONFIG until then);
  - the next configuration is the untried one nearest the incumbent (steps along each knob's value
    list), so it walks outward from what measured best;
  - direction: a move along a knob in the direction that measured faster elsewhere (the other knobs
    equal) goes first, one that measured slower goes later;
  - a knob value that appeared in a failed configuration (compile error, timeout, crash, wrong answer,
    out of resources) pushes every configuration with that value back;
  - no configuration is ever evaluated twice; when none is left the search space is exhausted.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from workflows.models import TunerTrial

FULL_ENUMERATION_LIMIT = 4096  # beyond this: neighbourhoods of the fastest, then product order


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)


def space_size(tunables: dict[str, list[Any]]) -> int:
    n = 1
    for values in tunables.values():
        n *= max(1, len(values))
    return n


def _index(tunables: dict[str, list[Any]], knob: str, value: Any) -> int | None:
    try:
        return list(tunables[knob]).index(value)
    except ValueError:
        return None


def _distance(tunables, a: dict[str, Any], b: dict[str, Any]) -> int:
    d = 0
    for k in tunables:
        ia, ib = _index(tunables, k, a.get(k)), _index(tunables, k, b.get(k))
        if ia is None or ib is None:
            d += 0 if a.get(k) == b.get(k) else 1
        else:
            d += abs(ia - ib)
    return d


def _ok(trials: list[TunerTrial]) -> list[TunerTrial]:
    return [t for t in trials if t.status == "ok" and (t.latency_us is not None or t.speedup is not None)]


def cost(trials: list[TunerTrial]):
    """What the tuner minimises, the workflow's own yardstick (workflows/yardstick.py) as a cost: 1/speedup against
    the strongest baseline when every OK profile has one (baselines timed in the same run absorb drift
    of the machine), else the latency."""
    ok = _ok(trials)
    if ok and all(t.speedup for t in ok):
        return lambda t: 1.0 / t.speedup
    return lambda t: t.latency_us if t.latency_us is not None else float("inf")


def incumbent(trials: list[TunerTrial], start: dict[str, Any]) -> tuple[dict[str, Any], TunerTrial | None]:
    ok = _ok(trials)
    if not ok:
        return start, None
    c = cost(trials)
    best = min(ok, key=lambda t: (c(t), trials.index(t)))
    return best.config, best


def _direction_evidence(tunables, trials: list[TunerTrial]) -> dict[tuple[str, int], int]:
    """For each (knob, direction): how often moving that knob that way, all else equal, measured faster
    (+1) or slower (-1), over every pair of OK profiles that differ in that knob alone (neighbours in
    its value list)."""
    ok = _ok(trials)
    c = cost(trials)
    ev: dict[tuple[str, int], int] = {}
    for k in tunables:
        groups: dict[str, list[tuple[int, float]]] = {}
        for t in ok:
            i = _index(tunables, k, t.config.get(k))
            if i is None:
                continue
            rest = config_key({x: v for x, v in t.config.items() if x != k})
            groups.setdefault(rest, []).append((i, c(t)))
        for pts in groups.values():
            pts.sort()
            for (i, a), (j, b) in zip(pts, pts[1:]):
                if i == j or a == b:
                    continue
                up = 1 if b < a else -1  # going up the value list got faster?
                ev[(k, 1)] = ev.get((k, 1), 0) + up
                ev[(k, -1)] = ev.get((k, -1), 0) - up
    return ev


def _suspect_values(trials: list[TunerTrial]) -> set[tuple[str, str]]:
    """Knob values seen in a configuration that failed and never in one that worked."""
    failed: set[tuple[str, str]] = set()
    worked: set[tuple[str, str]] = set()
    for t in trials:
        if t.status == "pending":
            continue
        pairs = {(k, repr(v)) for k, v in t.config.items()}
        (worked if t.status == "ok" else failed).update(pairs)
    return failed - worked


def _neighbourhood(tunables: dict[str, list[Any]], center: dict[str, Any], radius: int = 2):
    """`center` with one or two knobs moved one step along their value lists."""
    keys = list(tunables)
    for r in range(1, radius + 1):
        for moved in itertools.combinations(keys, r):
            for signs in itertools.product((-1, 1), repeat=r):
                cfg = dict(center)
                for k, sgn in zip(moved, signs):
                    i = _index(tunables, k, center.get(k))
                    if i is None or not 0 <= i + sgn < len(tunables[k]):
                        break
                    cfg[k] = tunables[k][i + sgn]
                else:
                    yield cfg


def _everything(tunables: dict[str, list[Any]], base: dict[str, Any], limit: int | None = None):
    keys = list(tunables)
    for values in itertools.islice(itertools.product(*(tunables[k] for k in keys)), limit):
        yield {**base, **dict(zip(keys, values))}


def owns(key: str, share: tuple[int, int] | None) -> bool:
    """Whether a configuration is in agent `share[0]`'s part of the space, of `share[1]` parts: a stable
    hash of its key splits the space among the agents of a run, so no two agents try one configuration."""
    if share is None:
        return True
    index, parts = share
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) % parts == index


def next_config(tunables: dict[str, list[Any]], trials: list[TunerTrial], start: dict[str, Any],
                share: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """The next configuration to evaluate, or None when every one has been tried (every one of its
    part, with `share`: (agent index from 0, agents)).

    Spaces up to FULL_ENUMERATION_LIMIT are ranked whole. Larger ones (a tuned kernel may declare a
    billion) rank the incumbent's neighbourhood (one or two knobs one step away), then the
    neighbourhoods of the next-fastest configurations, then take the first untried in product order."""
    tried = {t.key for t in trials}
    inc, _ = incumbent(trials, start)
    if share is not None:  # the other agents' parts count as tried
        tried = _NotMine(tried, share)
    if space_size(tunables) <= FULL_ENUMERATION_LIMIT:
        return _best_ranked(tunables, trials, inc, _everything(tunables, inc), tried)
    c = cost(trials)
    centers = [inc] + [t.config for t in sorted(_ok(trials), key=c)[1:10]]
    for center in centers:
        found = _best_ranked(tunables, trials, inc, _neighbourhood(tunables, center), tried)
        if found is not None:
            return found
    for cfg in _everything(tunables, inc, limit=FULL_ENUMERATION_LIMIT * 100):
        if config_key(cfg) not in tried:
            return cfg
    return None


class _NotMine(set):
    """`tried` for an agent: its own trials, and every configuration outside its part."""
    def __init__(self, tried: set[str], share: tuple[int, int]) -> None:
        super().__init__(tried)
        self.share = share

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or not owns(str(key), self.share)


def _best_ranked(tunables, trials, inc, candidates, tried: set[str]) -> dict[str, Any] | None:
    suspect = _suspect_values(trials)
    evidence = _direction_evidence(tunables, trials)
    keys = list(tunables)
    best_rank, best_cfg = None, None
    for order, cfg in enumerate(candidates):
        if config_key(cfg) in tried:
            continue
        penalty = sum(1 for k in keys if (k, repr(cfg.get(k))) in suspect)
        dist = _distance(tunables, cfg, inc)
        bonus = 0
        for k in keys:
            i, j = _index(tunables, k, inc.get(k)), _index(tunables, k, cfg.get(k))
            if i is not None and j is not None and i != j:
                e = evidence.get((k, 1 if j > i else -1), 0)
                bonus += (e > 0) - (e < 0)
        rank = (dist + 2 * penalty - bonus, penalty, order)
        if best_rank is None or rank < best_rank:
            best_rank, best_cfg = rank, cfg
    return best_cfg
