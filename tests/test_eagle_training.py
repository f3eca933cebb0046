"""The feature-head training pipeline runs end to end in quick mode, resumes, and exports loadable weights."""
import json

import pytest
import torch

import specdec_ref as sd
from specdec_ref.distill import eagle
from specdec_ref.drafters import FeatureDrafter
from specdec_ref.models import feature_draft


@pytest.mark.slow
def test_quick_eagle_run_trains_resumes_and_exports(offline_pair, tmp_path):
    target, _, tok = offline_pair
    cfg = eagle.EagleConfig(out=str(tmp_path / "run"), **eagle.QUICK)
    head, curve, report = eagle.run(cfg, target, tok)
    assert [c["step"] for c in curve] == [3, 6]
    assert (tmp_path / "run" / "ckpt.pt").exists() and (tmp_path / "run" / "prompts.json").exists()
    prompts = json.loads((tmp_path / "run" / "prompts.json").read_text())
    assert not set(p.lower() for p in prompts) & set(p.lower() for p in eagle.HELD_OUT)  # held out stays held out
    assert set(report) == {"greedy", "T=1"} and len(report["greedy"]) == 4
    _, again, _ = eagle.run(cfg, target, tok)  # every stage resumes: nothing left to do
    assert again == curve
    assert "resumed from step 6" in (tmp_path / "run" / "train.log").read_text()
    feature_draft.save(head, tmp_path / "export", {"note": "test"})
    loaded = feature_draft.load(target, tmp_path / "export")
    ids = sd.encode_chat(tok, "Name a colour.")
    greedy = sd.SamplingConfig(0)
    plain = sd.autoregressive_generate(target, ids, 8, sampling=greedy).tokens
    spec = sd.speculative_generate(target, FeatureDrafter(loaded), ids, 8, gamma=2, sampling=greedy).tokens
    assert spec.tolist() == plain.tolist()  # fp32: the offline target has no near-tie in these 8 tokens
    with torch.no_grad():
        assert torch.equal(loaded.fc.weight, head.fc.weight.half().float())  # shipped in float16, loaded back


def test_corpus_merges_other_runs_and_refuses_a_folder_without_answers(tmp_path):
    from specdec_ref.distill.eagle import EagleConfig, corpus
    for run in ("a", "b"):
        (tmp_path / run / "answers").mkdir(parents=True)
        for i in range(2):
            (tmp_path / run / "answers" / f"shard_{i:05d}.pt").write_bytes(b"")
    own = sorted((tmp_path / "a" / "answers").glob("*.pt"))
    cfg = EagleConfig(out=str(tmp_path / "a"), extra_runs=str(tmp_path / "b"))
    merged = corpus(cfg, own)
    assert merged[:2] == own and [p.parent.parent.name for p in merged[2:]] == ["b", "b"]
    assert corpus(EagleConfig(out=str(tmp_path / "a")), own) == own
    with pytest.raises(ValueError, match="no answers"):
        corpus(EagleConfig(out=str(tmp_path / "a"), extra_runs=str(tmp_path / "missing")), own)
