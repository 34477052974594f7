"""The shipped `tuned` MLA-decode kernel, judged by the evaluator on the CPU (Triton interpreter).

Odd shapes on purpose: head counts that are not a multiple of the head block (3, 5, 20, 128), sequence
lengths that are not a multiple of any tile, B=3, a one-row cache, and more splits than rows (empty
splits in the merge). The shipped CONFIG may take the one-split path on tiny shapes, so the split and
merge path is also forced with `with_config`. A merge that ignores the log-sum-exp must be caught."""
from kernels.evaluator.evaluate import EvalRequest, evaluate, request_for
from kernels.evaluator.policy import check_source
from kernels.problems.spec import get_problem
from kernels.problems.tunables import read_tunables, with_config

SPEC = get_problem("mla_decode")
TUNED = request_for("mla_decode", "tuned").source


def judge(source: str, shapes: list[dict] | None = None, shape_set: str | None = None):
    # mode "test": policy, compile, correctness with 3 fresh seeds per shape; no timing on the CPU;
    # no random probe shapes either (the shapes here are chosen to be awkward, and time is short)
    req = EvalRequest(problem="mla_decode", source=source, kernel="tuned", device="cpu", mode="test",
                      shapes=shapes or [], shape_set=shape_set, timeout_s=300, baselines=False, probe_shapes=0)
    return evaluate(req)


def forced_splits(**extra) -> str:
    """The shipped source with a small head block and tile in both regimes (small and large batch),
    so tiny shapes go through the merge."""
    cfg = dict(read_tunables(TUNED)[1])
    for pre in ("", "SMALL_"):
        cfg.update({pre + "BLOCK_H": 16, pre + "BLOCK_N": 16, pre + "SPLIT_WAVES": 1})
    cfg.update({"MIN_SPLIT": 32, "NUM_SPLITS": "auto", **extra})
    return with_config(TUNED, cfg)


def test_shipped_and_policy_clean():
    assert "tuned" in SPEC.shipped_kernels
    assert check_source(TUNED, SPEC.entry_point) == []
    tunables, config = read_tunables(TUNED)
    for knob, value in config.items():
        assert value in tunables[knob], f"CONFIG[{knob!r}] = {value!r} is not one of TUNABLES[{knob!r}]"


def test_smoke_shapes_ok():
    v = judge(TUNED, shape_set="smoke")
    assert v.status == "ok", v.reason + v.log_tail
    assert all(r.correct and r.seeds == 3 for r in v.shapes)
    assert any(k.endswith("_mla_split_kernel") for k in v.kernels_launched)


def test_odd_shapes_with_the_shipped_config():
    shapes = [{"B": 3, "H": 5, "S": 77}, {"B": 1, "H": 128, "S": 45}, {"B": 2, "H": 16, "S": 1}]
    v = judge(TUNED, shapes=shapes)
    assert v.status == "ok", v.reason + v.log_tail
    assert [r.shape for r in v.shapes] == shapes and all(r.correct for r in v.shapes)


def test_split_and_merge_path_on_odd_shapes():
    # B=3, H=17 (two head blocks of 16, the second holding one head), S=70: splits of 48 and 22 rows
    v = judge(forced_splits(), shapes=[{"B": 3, "H": 17, "S": 70}])
    assert v.status == "ok", v.reason + v.log_tail
    assert any(k.endswith("_mla_merge_kernel") for k in v.kernels_launched)


def test_more_splits_than_rows():
    # a fixed 8 splits of 16 rows over 5 rows: the first split is partial, the other 7 are empty and
    # must weigh nothing in the merge
    v = judge(forced_splits(NUM_SPLITS=8), shapes=[{"B": 2, "H": 3, "S": 5}])
    assert v.status == "ok", v.reason + v.log_tail
    assert any(k.endswith("_mla_merge_kernel") for k in v.kernels_launched)


def test_broken_merge_is_incorrect():
    # the classic split-KV bug: average the splits instead of weighing them by their softmax mass
    old, new = "w = tl.math.exp2(lse - m_new)", "w = tl.where(s_ok, 1.0, 0.0)"
    assert old in TUNED
    source = forced_splits().replace(old, new)
    v = judge(source, shapes=[{"B": 1, "H": 3, "S": 77}])
    assert v.status == "incorrect", v.reason


def test_input_dtype_workspace_and_a_merge_over_several_chunks():
    # partial outputs in the input's dtype (fp16 on the CPU); 64 fixed splits of 16 rows over 600 rows
    # (38 with rows, 26 empty), merged 16 at a time (MERGE_BLOCK_D 512): four chunks, the last empty
    source = forced_splits(WORKSPACE="input", SMALL_WORKSPACE="input", NUM_SPLITS=64, MERGE_BLOCK_D=512)
    v = judge(source, shapes=[{"B": 1, "H": 8, "S": 600}])
    assert v.status == "ok", v.reason + v.log_tail
    assert any(k.endswith("_mla_merge_kernel") for k in v.kernels_launched)


def test_merge_that_forgets_a_larger_maximum_is_incorrect():
    # the one-pass merge must rescale what it summed when a later chunk of splits holds a larger
    # log-sum-exp; with 8 heads and 3 seeds, chunk 0 holds every maximum with odds below 1e-8
    old = "acc = acc * rescale + tl.sum("
    assert TUNED.count(old) == 1
    source = forced_splits(NUM_SPLITS=64, MERGE_BLOCK_D=512).replace(old, "acc = acc + tl.sum(")
    v = judge(source, shapes=[{"B": 1, "H": 8, "S": 600}])
    assert v.status == "incorrect", v.reason


def test_tokens_form_on_odd_shapes():
    # FORM "tokens" (cache rows as the products' M dimension) through both paths: the split and merge
    # path (B=3, H=17: a head block holding one head, S=70: a partial last tile) and the one-split
    # path that writes the output directly (S=45 fits one split at MIN_SPLIT=64)
    source = forced_splits(FORM="tokens", SMALL_FORM="tokens")
    v = judge(source, shapes=[{"B": 3, "H": 17, "S": 70}])
    assert v.status == "ok", v.reason + v.log_tail
    assert any(k.endswith("_mla_merge_kernel") for k in v.kernels_launched)
    cfg = dict(read_tunables(TUNED)[1], FORM="tokens", SMALL_FORM="tokens", MIN_SPLIT=64)
    v = judge(with_config(TUNED, cfg), shapes=[{"B": 1, "H": 5, "S": 45}])
    assert v.status == "ok", v.reason + v.log_tail
    assert not any(k.endswith("_mla_merge_kernel") for k in v.kernels_launched)


def test_broken_tokens_form_is_incorrect():
    # online softmax's classic bug in the transposed form: the numerator not rescaled when the
    # running max grows (the denominator is), which a split of several tiles exposes
    old = "acc = tl.dot(tl.trans(c), p.to(c.dtype), acc=acc * alpha[None, :])"
    assert TUNED.count(old) == 1
    source = forced_splits(FORM="tokens", SMALL_FORM="tokens").replace(
        old, "acc = tl.dot(tl.trans(c), p.to(c.dtype), acc=acc)")
    v = judge(source, shapes=[{"B": 1, "H": 3, "S": 77}])
    assert v.status == "incorrect", v.reason
