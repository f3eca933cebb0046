"""Chapter 1's measurement helpers: timing, device ceilings, model accounting, KV-cache latency."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_ref.cache import cache_kwargs
from specdec_ref.lab import timing as T
from specdec_ref.chapters.exercises import ch1


@pytest.fixture(scope="module")
def small_llama():
    """A 2-layer, 128-wide synthetic Llama in float64 (exact enough to compare logits)."""
    return T.synthetic_llama(2, 128, vocab_size=256, dtype=torch.float64)


def gqa_llama(tied: bool) -> LlamaForCausalLM:
    """A tiny Llama with grouped-query attention (4 query heads share 2 kv heads)."""
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(config).eval()


# --- timing ---------------------------------------------------------------------------------

def test_time_fn_runs_warmup_untimed_then_times_each_repeat():
    calls, setups = [], []
    timing = T.time_fn(lambda: calls.append(1), "cpu", warmup=2, repeats=5, setup=lambda: setups.append(1))
    assert len(calls) == 7 and len(setups) == 7  # setup precedes every call, warm-up included
    assert len(timing.times) == 5


def test_time_fn_explains_bad_repeats():
    with pytest.raises(ValueError, match="repeats >= 1"):
        T.time_fn(lambda: None, "cpu", repeats=0)


def test_the_inside_clock_books_only_the_wrapped_calls_and_counts_the_targets():
    import time
    clock = T.InsideClock()
    slow = clock.wrap(lambda x: (time.sleep(0.02), x * 2)[1], is_target=True)
    other = clock.wrap(lambda x: x + 1)
    x = torch.ones(2)
    assert torch.equal(slow(x), x * 2) and torch.equal(other(x), x + 1)  # the calls' own outputs
    assert clock.seconds >= 0.02 and clock.target_calls == 1
    before = clock.seconds
    time.sleep(0.02)  # power: time outside the wrapped calls is not booked
    clock.add(0.5)
    assert clock.seconds - before == pytest.approx(0.5) and clock.target_calls == 1


def test_median_and_spread_ignore_one_outlier():
    timing = T.Timing([1.0, 1.0, 1.1, 0.9, 100.0])
    assert timing.median == 1.0
    assert timing.spread == pytest.approx(0.05)
    assert T.Timing([2.0]).spread == 0.0


def test_bandwidth_counts_read_and_write_bytes_per_copy():
    rate = T.measure_bandwidth(n_bytes=2**22, device="cpu", warmup=1, repeats=3)
    assert rate.unit == "B/s" and len(rate.values) == 3
    assert 1e8 < rate.median < 1e13  # somewhere between a slow laptop and an HBM3e GPU
    assert "GB/s" in str(rate)


def test_bandwidth_refuses_buffers_too_small_to_measure_memory():
    with pytest.raises(ValueError, match="at least 1 MiB"):
        T.measure_bandwidth(n_bytes=1000)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_throughput_is_positive_flops_at_the_asked_dtype(dtype):
    rate = T.measure_matmul(n=128, dtype=dtype, device="cpu", warmup=1, repeats=3)
    assert rate.unit == "FLOP/s" and len(rate.values) == 3 and rate.median > 1e6


def test_skinny_matmul_counts_two_flops_per_row_per_weight(monkeypatch):
    monkeypatch.setattr(T, "time_fn", lambda fn, device, warmup, repeats: T.Timing([1.0] * repeats))
    assert T.measure_matmul(n=64, rows=3, device="cpu", repeats=2).values == [2 * 3 * 64 * 64] * 2
    assert T.measure_matmul(n=64, rows=3, cols=10, device="cpu", repeats=1).values == [2 * 3 * 64 * 10]
    assert T.measure_matmul(n=64, device="cpu", repeats=1).values == [2 * 64**3]


# --- accounting -----------------------------------------------------------------------------

def test_tied_embedding_is_counted_once_and_read_in_full_by_the_head():
    model = gqa_llama(tied=True)
    n = sum(p.numel() for p in model.parameters())  # parameters() already yields a tied tensor once
    assert T.param_count(model) == n
    assert T.weight_bytes(model) == pytest.approx(4 * n, rel=1e-3)  # (plus the tiny rotary buffer)
    assert T.matmul_params(model) == sum(m.weight.numel() for m in model.modules()
                                         if isinstance(m, torch.nn.Linear))


def test_untied_input_embedding_is_not_counted_as_read():
    model = gqa_llama(tied=False)
    table = model.get_input_embeddings().weight.numel()
    assert T.weight_bytes(model) == pytest.approx(4 * (T.param_count(model) - table), rel=1e-3)


class PartialHead(torch.nn.Module):
    """A head that keeps the full [V, d] table as `weight` but multiplies only some of its rows."""

    def __init__(self, table: torch.nn.Parameter, keep: torch.Tensor):  # [V, d], [n]
        super().__init__()
        self.weight = table
        self.register_buffer("sub_weight", table.detach()[keep].clone())  # [n, d]

    def forward(self, hidden):  # [..., d] -> [..., V]
        out = hidden.new_full((*hidden.shape[:-1], self.weight.shape[0]), float("-inf"))  # [..., V]
        return out.index_copy_(-1, torch.arange(self.sub_weight.shape[0]), hidden @ self.sub_weight.T)


def test_a_head_over_part_of_the_vocabulary_counts_only_the_rows_it_multiplies():
    model = gqa_llama(tied=True)
    full = T.weight_bytes(model)
    model.lm_head = PartialHead(model.get_input_embeddings().weight, torch.arange(10))
    table = model.get_input_embeddings().weight
    assert T.weight_bytes(model) == pytest.approx(full - 4 * table.numel() + 4 * 10 * table.shape[1],
                                                  rel=1e-3)
    assert T.matmul_params(model) == sum(m.weight.numel() for m in model.model.layers.modules()
                                         if isinstance(m, torch.nn.Linear)) + 10 * table.shape[1]


def test_weight_bytes_halve_in_bfloat16(small_llama):
    model = T.synthetic_llama(2, 128, vocab_size=256)
    assert (T.weight_bytes(model.to(torch.bfloat16)) * 2
            == T.weight_bytes(T.synthetic_llama(2, 128, vocab_size=256)))


def test_kv_cache_bytes_match_a_real_dynamic_cache():
    model = gqa_llama(tied=True)
    cache = T.prefilled_cache(model, context_len=11, batch_size=3)
    real = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert T.kv_cache_bytes(model, 11, 3) == real


def test_flops_are_two_per_matmul_parameter_per_token_plus_causal_attention(small_llama):
    layers, heads, _, head_dim = T._attention_shape(small_llama)
    matmul = 2 * T.matmul_params(small_llama)
    assert T.forward_flops(small_llama, 1, context_len=0) == matmul + 4 * layers * heads * head_dim * 1
    assert (T.forward_flops(small_llama, 3, context_len=5)
            == 3 * matmul + 4 * layers * heads * head_dim * (15 + 6))
    assert T.forward_flops(small_llama, 3, 5, batch_size=4) == 4 * T.forward_flops(small_llama, 3, 5)


def test_arithmetic_intensity_grows_about_linearly_with_k_while_weights_dominate():
    model = T.synthetic_llama(2, 256)
    ratio = (T.arithmetic_intensity(model, 8, context_len=16)
             / T.arithmetic_intensity(model, 1, context_len=16))
    assert 7 < ratio < 8.1
    assert T.arithmetic_intensity(model, 1) == pytest.approx(0.5, rel=0.05)  # fp32: 2 FLOPs per 4 bytes


def test_roofline_is_bandwidth_slope_below_the_ridge_and_flat_above():
    peak, bw = 100e9, 10e9
    assert T.ridge_point(peak, bw) == 10
    assert T.roofline(2, peak, bw) == 20e9
    assert T.roofline([2, 10, 50], peak, bw) == [20e9, 100e9, 100e9]
    assert torch.equal(T.roofline(torch.tensor([1.0, 100.0]), peak, bw), torch.tensor([10e9, 100e9]))
    assert T.roofline_time(flops=1e9, n_bytes=1e9, peak_flops=peak, bandwidth=bw) == 0.1  # memory-bound


def test_spec_sheets_put_the_gpu_ridge_between_100_and_450_flop_per_byte():
    """A typo in a quoted sheet (a TB/s for a GB/s, a sparse TFLOP/s figure) would leave this band: the L4, a
    300 GB/s card with 121 dense TFLOP/s, sits highest (403 FLOP/byte), the H200 lowest (206)."""
    for name, spec in T.SPEC_SHEETS.items():
        assert 100 < T.ridge_point(spec.flops_16bit, spec.bandwidth) < 450, name


# --- KV-cache forward passes -----------------------------------------------------------------

@torch.inference_mode()
def test_one_k_token_pass_scores_exactly_like_k_one_token_passes(small_llama):
    cache = T.prefilled_cache(small_llama, 7)
    new = torch.tensor([[5, 17, 42, 3]])
    together = small_llama(input_ids=new, **cache_kwargs(small_llama, cache),
                           use_cache=True).logits[0]  # [4, V]
    cache.crop(-4)
    apart = torch.cat([small_llama(input_ids=new[:, i:i + 1], **cache_kwargs(small_llama, cache),
                                   use_cache=True).logits[0]
                       for i in range(4)])  # 4 x [1, V] -> [4, V]
    torch.testing.assert_close(together, apart)


@torch.inference_mode()
@pytest.mark.parametrize("sequential", [False, True])
def test_each_timed_call_leaves_the_cache_as_it_found_it(small_llama, sequential):
    cache = T.prefilled_cache(small_llama, 9, batch_size=2)
    step = (T._sequential if sequential else T._one_pass)(small_llama, cache,
                                                          torch.ones(2, 5, dtype=torch.long))
    for _ in range(3):
        step()
        assert cache.get_seq_length() == 9


def test_forward_latency_refuses_zero_tokens(small_llama):
    with pytest.raises(ValueError, match="k must be >= 1"):
        T.forward_latency(small_llama, 0)


def test_forward_latency_returns_one_time_per_repeat(small_llama):
    timing = T.forward_latency(small_llama, 4, context_len=8, batch_size=2, warmup=1, repeats=3)
    assert len(timing.times) == 3 and timing.median > 0


def test_latency_curve_times_every_k_every_round():
    model = T.synthetic_llama(1, 64, vocab_size=128)
    curve = T.latency_curve(model, [1, 2, 4], context_len=8, warmup=1, repeats=3, sequential_ks=[2])
    assert curve.ks == [1, 2, 4] and all(len(curve.one_pass[k].times) == 3 for k in curve.ks)
    assert len(curve.sequential[2].times) == 3
    assert curve.cost_ratio(1) == 1.0 and curve.cost_ratio(4) > 0


def test_log_grid_doubles_up_to_the_maximum():
    assert T.log_grid(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert T.log_grid(100, 4) == [4, 8, 16, 32, 64]
    with pytest.raises(ValueError):
        T.log_grid(0)


# --- synthetic models ------------------------------------------------------------------------

def test_deep_narrow_and_shallow_wide_synthetics_carry_the_same_layer_weights():
    deep, wide = (T.synthetic_llama(*T.SYNTHETIC_SIZES[name]) for name in
                  ("synthetic 32x256 (deep, narrow)", "synthetic 2x1024 (shallow, wide)"))
    layer_params = [T.matmul_params(m) - m.lm_head.weight.numel() for m in (deep, wide)]
    assert layer_params[0] == pytest.approx(layer_params[1], rel=0.05)
    assert T.count_ops(deep) > 8 * T.count_ops(wide)  # ... but issue many times more operations


def test_synthetic_llama_is_reproducible_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a, b = T.synthetic_llama(1, 64, seed=3), T.synthetic_llama(1, 64, seed=3)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_synthetic_llama_explains_bad_width():
    with pytest.raises(ValueError, match="multiple of 64"):
        T.synthetic_llama(1, 100)


# --- exercise checkers -----------------------------------------------------------------------

def test_check_step_time_accepts_bytes_over_bandwidth_and_catches_milliseconds(capsys):
    ch1.check_step_time(0.1, n_bytes=1e9, bandwidth=10e9, measured_s=0.2)
    assert "50%" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="milliseconds"):
        ch1.check_step_time(100.0, n_bytes=1e9, bandwidth=10e9)
    with pytest.raises(AssertionError, match="500.0 ms is too high"):
        ch1.check_step_time(0.5, n_bytes=1e9, bandwidth=10e9)


def test_unanswered_exercises_say_not_attempted_and_do_not_raise(capsys):
    ch1.check_step_time(None, 1e9, 1e10)
    ch1.check_intensity(None, 4, 2)
    ch1.check_knee(None, 1e12, 1e10, 2)
    ch1.check_kv_cache_bytes(None, gqa_llama(True), 10)
    assert capsys.readouterr().out.count("Not attempted yet") == 4  # the one idiom of every checker


def test_check_intensity_and_knee():
    ch1.check_intensity(5.0, k=5, bytes_per_param=2)
    with pytest.raises(AssertionError, match="2 FLOPs"):
        ch1.check_intensity(2.5, k=5, bytes_per_param=2)
    ch1.check_knee(295, peak_flops=989e12, bandwidth=3.35e12, bytes_per_param=2)
    with pytest.raises(AssertionError, match="ridge"):
        ch1.check_knee(30, peak_flops=989e12, bandwidth=3.35e12, bytes_per_param=2)


def test_check_kv_cache_bytes_spots_missing_values_and_gqa():
    model = gqa_llama(tied=True)
    truth = T.kv_cache_bytes(model, 100)
    ch1.check_kv_cache_bytes(truth, model, 100)
    with pytest.raises(AssertionError, match="keys and values"):
        ch1.check_kv_cache_bytes(truth / 2, model, 100)
    with pytest.raises(AssertionError, match="grouped-query"):
        ch1.check_kv_cache_bytes(truth * 2, model, 100)


@pytest.mark.slow
def test_offline_target_reads_its_tied_table_once_and_the_draft_reads_less(offline_pair):
    target, draft, _ = offline_pair
    assert T.weight_bytes(target) == pytest.approx(4 * T.param_count(target), rel=1e-6)  # tied head
    assert T.weight_bytes(draft) < T.weight_bytes(target)
