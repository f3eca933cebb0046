"""`plot_bench` draws the side-by-side figure from a benchmark result, and `bench --plot` asks for it (no
model needed)."""
import matplotlib.image

from specdec_ref.cli import main
from specdec_ref.lab import bench


def synthetic_result() -> dict:
    rows = [("plain (target only)", 10.0), ("speculative, ours (γ=3)", 14.0), ("HF generate, plain", 9.0),
            ("HF assisted, its defaults", 11.0), ("HF assisted, γ=3 constant", 13.0)]
    return {"settings": {"max_new_tokens": 32, "gamma": 3, "prompts": 2, "device": "cpu"},
            "rows": [{"method": m, "tokens": 64, "seconds": 64 / tps, "tokens_per_second": tps, "alpha": None,
                      "acceptance_rate": None, "speedup_vs_plain": tps / 10.0} for m, tps in rows],
            "alpha": 0.6, "cost_ratio_c": 0.1, "predicted_speedup": 1.6}


def test_plot_bench_writes_a_png_with_one_bar_per_row_and_the_prediction(tmp_path):
    path = tmp_path / "bench.png"
    fig = bench.plot_bench(synthetic_result(), str(path))
    assert path.exists() and matplotlib.image.imread(path).shape[0] > 100
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1].startswith("predicted") and "HF assisted, its defaults" in labels and len(labels) == 6
    assert [round(p.get_width(), 2) for p in ax.patches] == [1.0, 1.4, 0.9, 1.1, 1.3, 1.6]
    assert "speculative, ours" in ax.get_title() and "1.40×" in ax.get_title()


def test_plot_bench_without_a_path_only_returns_the_figure(tmp_path):
    fig = bench.plot_bench(synthetic_result())
    assert fig.axes and not list(tmp_path.iterdir())


def test_bench_cli_passes_plot_path_to_plot_bench(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr("specdec_ref.cli._load", lambda args: (None, None, None))
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: synthetic_result())
    monkeypatch.setattr(bench, "plot_bench", lambda result, path: seen.update(path=path, result=result))
    main(["bench", "--prompts", "1", "--json", "", "--plot", str(tmp_path / "b.png"), "--pair", "auto"])
    assert (seen["path"] == str(tmp_path / "b.png")
            and seen["result"]["rows"][1]["method"].startswith("speculative"))
