"""The chapter figures and widgets: they draw what the loop did, and their titles state computed facts."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import specdec_ref as sd  # noqa: E402
from specdec_ref.chapters import viz  # noqa: E402


class FakeTokenizer:
    """Enough of a tokenizer for the widgets: ids are letters."""
    chat_template = None
    eos_token_id = None

    def decode(self, ids):
        return "".join(" " + "abcdefgh"[i] if i % 2 else "abcdefgh"[i] + "\n" * (i == 4) for i in ids)

    def __call__(self, text, return_tensors="pt"):
        class Enc:
            input_ids = torch.tensor([[1 + (ord(c) % 5) for c in text[:6]] or [1]])
        return Enc()


@pytest.fixture(scope="module")
def trace(toy_pair):
    target, draft = toy_pair
    return viz.record(target, draft, torch.tensor([[1, 2, 3]]), 20, 3, sd.SamplingConfig(1.0),
                      torch.Generator().manual_seed(0))


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_record_keeps_one_step_per_iteration_and_the_generated_tokens(trace):
    assert len(trace.steps) == len(trace.generation.stats.accepted)
    assert sum(s.n_accepted + 1 for s in trace.steps) == trace.generation.tokens.shape[0] == 20
    assert trace.sequence.tolist()[:3] == [1, 2, 3]
    for k, s in enumerate(trace.steps):
        assert trace.context(k).shape[0] == s.context_len


def test_step_kinds_mark_each_drafted_token_and_exactly_one_emitted_token(trace):
    for s in trace.steps:
        kinds = [k for _, k in viz.step_kinds(s)]
        gamma, n = s.draft_tokens.shape[0], s.n_accepted
        assert len(kinds) == gamma + 1
        assert kinds[:n] == ["accepted"] * n
        if n < gamma:
            assert kinds[n] == "rejected" and kinds[-1] == "resampled"
            assert kinds[n + 1:-1] == ["discarded"] * (gamma - n - 1)
        else:
            assert kinds[-1] == "bonus"
        assert viz.step_kinds(s)[-1][0] == s.next_token
    assert {"accepted", "rejected"} <= {k for s in trace.steps for _, k in viz.step_kinds(s)}


def test_token_text_makes_spaces_and_newlines_visible():
    tok = FakeTokenizer()
    assert viz.token_text(tok, 1) == "␣b"
    assert viz.token_text(tok, 4) == "e↵"
    assert viz.token_text(None, 7) == "7"


def test_plot_step_title_states_accepted_count_and_rejects_bad_position(trace):
    k = next(i for i, s in enumerate(trace.steps) if s.draft_tokens.shape[0] == 3)
    fig = viz.plot_step(trace, k, tokenizer=FakeTokenizer())
    n = trace.steps[k].n_accepted
    assert f"{n} of 3" in fig.axes[0].get_title() or "all 3" in fig.axes[0].get_title()
    for pos in range(4):
        viz.plot_step(trace, k, position=pos)
    with pytest.raises(ValueError, match="position must be in"):
        viz.plot_step(trace, k, position=4)


def test_plot_step_handles_an_iteration_that_drafted_nothing(toy_pair):
    target, draft = toy_pair
    tr = viz.record(target, draft, torch.tensor([[1, 2, 3]]), 2, 3, sd.SamplingConfig(1.0),
                    torch.Generator().manual_seed(3))
    empty = [k for k, s in enumerate(tr.steps) if s.draft_tokens.shape[0] == 0]
    if not empty:  # the first iteration accepted its single guess: force the case by asking for 1 token
        tr = viz.record(target, draft, torch.tensor([[1, 2, 3]]), 1, 3)
        empty = [0]
    fig = viz.plot_step(tr, empty[0])
    assert "bonus" in fig.axes[1].get_title()
    assert viz.step_kinds(tr.steps[empty[0]]) == [(tr.steps[empty[0]].next_token, "bonus")]


def test_plot_steps_draws_one_tape_per_iteration(trace):
    fig = viz.plot_steps(trace, [0, 1, 2], FakeTokenizer())
    assert len(fig.axes) == 3
    assert "3 target passes" in fig._suptitle.get_text()


def test_accepted_length_histogram_counts_every_iteration(trace):
    acc = trace.generation.stats.accepted
    counts = viz.accepted_length_counts(acc, 3)
    assert counts.sum() == len(acc) and counts.shape == (4,)
    fig = viz.plot_accepted_lengths(acc, 3)
    assert f"{len(acc)} iterations" in fig.axes[0].get_title()


def test_cache_plot_title_reports_the_entries_rollback_dropped(trace):
    dropped = sum(s.target_cache_before - s.target_cache_after for s in trace.steps)
    assert dropped > 0
    fig = viz.plot_cache_lengths(trace.steps)
    assert f"drops {dropped} target cache entries" in fig.axes[0].get_title()
    for s in trace.steps:  # the target's cache always ends one token behind the sequence
        assert s.target_cache_after == s.context_len + s.n_accepted


def test_mass_decomposition_adds_up_to_target():
    p, q = viz.normalise([3, 2, 1, 0, 1]), viz.normalise([1, 1, 1, 1, 1])
    parts = viz.mass_decomposition(p, q)
    torch.testing.assert_close(parts["accepted"] + parts["resampled"], p, atol=1e-12, rtol=0)
    assert float(parts["beta"]) == pytest.approx(1 - 0.5 * float((p - q).abs().sum()))
    fig = viz.plot_mass(p, q, list("abcde"))
    assert f"{float(parts['beta']):.3f}" in fig._suptitle.get_text()


def test_normalise_refuses_all_zero_weights():
    with pytest.raises(ValueError, match="positive"):
        viz.normalise([0, 0, 0])


def test_counts_plot_and_p_value_plot():
    fig = viz.plot_counts_vs_probs({0: 60, 1: 40}, {0: 0.6, 1: 0.4}, {0: "x", 1: "y"}, title="t")
    assert len(fig.axes[0].patches) >= 2  # a bar per token
    fig = viz.plot_p_values({"ours": 0.5, "bug": 0.0, "other bug": 1e-5}, 0.001)
    assert fig.axes[0].get_title().startswith("2 of 3 tests reject")


def test_step_through_widget_generates_and_navigates(toy_pair):
    pytest.importorskip("ipywidgets")
    target, draft = toy_pair
    ui = viz.step_through(target, draft, FakeTokenizer(), prompt="abc", gamma=2, max_new_tokens=8)
    buttons = [w for box in ui.children if hasattr(box, "children") for w in box.children
               if type(w).__name__ == "Button"]
    sliders = {w.description: w for box in ui.children if hasattr(box, "children") for w in box.children
               if type(w).__name__ == "IntSlider"}
    assert sliders["iteration"].max >= 1
    next_button = next(b for b in buttons if "next" in b.description)
    next_button.click()
    assert sliders["iteration"].value == 1
    info = next(w for w in ui.children if type(w).__name__ == "HTML")
    assert "target passes" in info.value


def test_pq_explorer_builds_one_slider_per_token_and_model():
    pytest.importorskip("ipywidgets")
    ui = viz.pq_explorer([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], ["a", "b", "c"])
    columns = ui.children[0].children
    assert [len(c.children) for c in columns] == [3, 3]
    beta = ui.children[1]
    assert beta.value.endswith("0.700")  # Σ min(p, q) = 0.2 + 0.3 + 0.2
    columns[0].children[0].value = 0.0  # p_target becomes (0, 0.6, 0.4): β = 0 + 0.3 + 0.4
    assert beta.value.endswith("0.700")
    columns[1].children[2].value = 0.0  # p_draft becomes (0.4, 0.6, 0): β = 0 + 0.6 + 0
    assert beta.value.endswith("0.600")
    for slider in columns[0].children:  # all of p_target at zero: a message, not an exception
        slider.value = 0.0
    assert "positive weight" in beta.value
