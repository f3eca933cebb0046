"""The target writes its own training data, 64 answers at a time: batched sampling fast enough for a corpus.

`sample_batch` answers B prompts at once and keeps each answer with the target's top-k soft labels. It runs at
about 2.1-2.4 times the rate of the plain batched loop it replaced (`sample_batch_plain`, kept as the readable
reference and the benchmark's other side; `scripts/bench_generator.py` measures both side by side):

* each prompt is prefilled alone, unpadded and unmasked (`prefill_slots`), its keys and values copied into
  left-padded buffers allocated once (`SlotLayer`), instead of one padded prefill through SDPA's masked path;
* one-token attention over those buffers is one grouped matmul with an additive mask built once per step
  (`one_token_attention`, registered with transformers only inside `sample_batch`);
* tokens come from `logits_to_probs` and the package's inverse-CDF `sample`, not `torch.multinomial` over 49k
  tokens; finished rows leave the batch once they are an eighth of it.
"""
from __future__ import annotations


import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ..cache import cache_kwargs
from ..models.kernels import attention_implementation
from ..sampling import SamplingConfig, logits_to_probs, sample


class SlotLayer(DynamicLayer):
    """One layer's keys and values in buffers [B, H_kv, capacity, d] allocated once, for batched decoding.

    A step writes its token into the next column in place (a DynamicLayer copies the whole history with
    torch.cat every step), and attention reads the whole buffer, with the columns not written yet masked.
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, n: int):  # [B, H_kv, capacity, d] each
        super().__init__()
        self.keys, self.values, self.n, self.is_initialized = keys, values, n, True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        k = key_states.shape[-2]  # [b, H_kv, k, d] new columns
        self.keys[:, :, self.n:self.n + k], self.values[:, :, self.n:self.n + k] = key_states, value_states
        self.n += k
        return self.keys, self.values  # [b, H_kv, capacity, d]

    def get_seq_length(self) -> int:
        return self.n

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keys, self.values = self.keys[indices], self.values[indices]


def one_token_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                        **kwargs):
    """Attention of one new token per row (query [b, H, 1, d]) to a SlotLayer's buffer ([b, H_kv, L, d]).

    The H / H_kv query heads that share a key head become rows of one matmul (no copies of the keys), and
    `attention_mask` [b, 1, 1, L] is the additive float32 mask `sample_batch` makes once a step (0 or -inf).
    CPU SDPA with a padding mask takes a kernel several times slower at this shape. Any other call (a
    prefill) goes to SDPA as usual.
    """
    if query.shape[2] != 1 or attention_mask is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    b, H, _, d = query.shape
    q = query.reshape(b, key.shape[1], H // key.shape[1], d)  # [b, H, 1, d] -> [b, H_kv, H / H_kv, d]
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * (scaling or d ** -0.5)  # [b, H_kv, H / H_kv, L]
    weights = (scores + attention_mask).softmax(-1).to(value.dtype)
    return torch.matmul(weights, value).reshape(b, 1, H, d), None  # [b, H_kv, H / H_kv, d] -> [b, 1, H, d]


AttentionInterface.register("one_token", one_token_attention)


def prefill_slots(target, prompts: list[torch.Tensor], capacity: int) -> tuple[Cache, torch.Tensor]:
    """Run each prompt alone (no padding, no mask) and lay its keys and values out left-padded in one
    SlotLayer cache of `capacity` columns -> (cache, next-token logits [B, V])."""
    B, T = len(prompts), max(p.shape[0] for p in prompts)
    logits, layers = [], None
    for b, p in enumerate(prompts):
        own = DynamicCache()
        logits.append(target(input_ids=p[None], **cache_kwargs(target, own), logits_to_keep=1).logits[0, -1])
        if layers is None:  # [B, H_kv, capacity, d] zero buffers, shaped like the first prompt's cache
            layers = [SlotLayer(*(x.new_zeros(B, x.shape[1], capacity, x.shape[3])
                                  for x in (its.keys, its.values)), T) for its in own.layers]
        for mine, its in zip(layers, own.layers):  # [1, H_kv, t, d] -> columns T - t .. T - 1 of row b
            start = T - p.shape[0]
            mine.keys[b, :, start:T], mine.values[b, :, start:T] = its.keys[0], its.values[0]
    return Cache(layers=layers), torch.stack(logits)  # [B, V]


def next_tokens(logits: torch.Tensor, temperature: float,
                generator: torch.Generator) -> torch.Tensor:  # [b, V] -> [b]
    """Greedy at temperature 0, else one draw per row from the target's distribution at that temperature."""
    if temperature == 0:
        return logits.argmax(-1)  # first index wins ties, as in `logits_to_probs`
    probs = logits_to_probs(logits, SamplingConfig(temperature)).to(generator.device)  # generator device
    return torch.cat([sample(row, generator) for row in probs]).to(logits.device)


@torch.inference_mode()
def sample_batch(target, prompts: list[torch.Tensor], max_new_tokens: int, temperature: float, top_k: int,
                 eos_token_id: int, generator: torch.Generator) -> list[dict]:
    """Answer B prompts at once (left-padded, one KV cache); keep each answer and its top-k soft labels.

    Each prompt is prefilled alone (`prefill_slots`), then all rows decode together, one token per row a step,
    into buffers allocated once, with `one_token_attention`. Rows that have written EOS leave the batch (and
    the cache) once they are an eighth of it (each leaving copies the cache), so long answers do not keep
    short ones busy. `sample_batch_plain` is the same loop with a DynamicCache and the model's own attention,
    from one padded prefill: the readable reference (`scripts/bench_generator.py` times the two).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    B, T, device = len(prompts), max(p.shape[0] for p in prompts), next(target.parameters()).device
    prompts = [p.to(device) for p in prompts]
    with attention_implementation(target, "one_token"):
        cache, logits = prefill_slots(target, prompts, T + max_new_tokens)  # [B, V]
        attend = torch.zeros(B, T + max_new_tokens, dtype=torch.bool, device=device)  # [B, L] real columns
        for b, p in enumerate(prompts):
            attend[b, T - p.shape[0]:T] = True
        pos = torch.tensor([p.shape[0] for p in prompts], device=device)[:, None]  # [B, 1] next token's place
        live = torch.arange(B, device=device)  # [b] the row each batch slot holds
        writing = torch.ones(B, dtype=torch.bool, device=device)  # [b] slots whose row has not written EOS
        answer = torch.zeros(B, max_new_tokens, dtype=torch.long, device=device)  # [B, n]
        label_ids = torch.zeros(B, max_new_tokens, top_k, dtype=torch.int32, device=device)  # [B, n, k]
        label_logp = torch.zeros(B, max_new_tokens, top_k, dtype=torch.float16, device=device)  # [B, n, k]
        length = torch.full((B,), max_new_tokens, device=device)  # [B] answer lengths
        for s in range(max_new_tokens):
            logits = logits.float()  # [b, V]
            top = logits.topk(top_k, dim=-1)  # [b, k]
            nxt = next_tokens(logits, temperature, generator)  # [b]
            rows = live[writing]  # [w] the rows that write this step
            answer[rows, s], label_ids[rows, s] = nxt[writing], top.indices[writing].to(torch.int32)
            label_logp[rows, s] = (top.values - logits.logsumexp(-1, keepdim=True))[writing].to(torch.float16)
            length[rows[nxt[writing] == eos_token_id]] = s + 1
            writing = writing & (nxt != eos_token_id)  # [b]
            if s == max_new_tokens - 1 or not bool(writing.any()):
                break
            if 8 * int((~writing).sum()) >= writing.shape[0]:  # finished rows leave once they are 1/8 of it
                keep = writing.nonzero()[:, 0]
                live, writing, nxt = live[keep], writing[keep], nxt[keep]
                attend, pos = attend[keep], pos[keep]
                cache.batch_select_indices(keep)
            attend[:, T + s] = True  # the column this step's token is written to
            bias = torch.zeros(attend.shape, device=device).masked_fill(~attend, float("-inf"))  # [b, L]
            logits = target(input_ids=nxt[:, None], attention_mask=bias[:, None, None, :], position_ids=pos,
                            **cache_kwargs(target, cache)).logits[:, -1]
            pos = pos + 1
    return [{"prompt": p.cpu().clone(), "answer": answer[b, :n].cpu(), "label_ids": label_ids[b, :n].cpu(),
             "label_logp": label_logp[b, :n].cpu()} for b, (p, n) in enumerate(zip(prompts, length.tolist()))]


@torch.inference_mode()
def sample_batch_plain(target, prompts: list[torch.Tensor], max_new_tokens: int, temperature: float,
                       top_k: int, eos_token_id: int, generator: torch.Generator) -> list[dict]:
    """`sample_batch` as first written: the same rows, from one padded prefill, a DynamicCache and the model's
    own attention (SDPA with a padding mask). The readable reference; slower, most of all on a CPU.

    Rows that have written EOS leave the batch (and the cache), so long answers do not keep short ones busy.
    """
    B, T, device = len(prompts), max(p.shape[0] for p in prompts), next(target.parameters()).device
    ids = torch.full((B, T), eos_token_id, dtype=torch.long, device=device)  # [B, T] left-padded
    mask = torch.zeros(B, T, dtype=torch.long, device=device)
    for b, p in enumerate(prompts):
        ids[b, T - p.shape[0]:], mask[b, T - p.shape[0]:] = p, 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]
    cache = DynamicCache()
    logits = target(input_ids=ids, attention_mask=mask, position_ids=pos, **cache_kwargs(target, cache),
                    logits_to_keep=1).logits[:, -1]
    live = torch.arange(B, device=device)  # rows still writing
    out = [{"answer": [], "label_ids": [], "label_logp": []} for _ in range(B)]
    for _ in range(max_new_tokens):
        logp = logits.float().log_softmax(-1)  # [b, V]
        top = logp.topk(top_k, dim=-1)  # [b, k]
        if temperature == 0:
            nxt = logp.argmax(-1)  # [b]
        else:
            probs = (logp / temperature).softmax(-1).to(generator.device)  # sampled where the generator lives
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0].to(device)  # [b]
        # one copy a step
        kept = nxt.cpu(), top.indices.to(torch.int32).cpu(), top.values.to(torch.float16).cpu()
        for j, row in enumerate(live.tolist()):
            out[row]["answer"].append(kept[0][j])
            out[row]["label_ids"].append(kept[1][j])
            out[row]["label_logp"].append(kept[2][j])
        going = nxt != eos_token_id  # [b]
        if not bool(going.any()):
            break
        if not bool(going.all()):  # drop finished rows from the batch and the cache
            keep = going.nonzero()[:, 0]
            live, nxt, mask, pos = live[keep], nxt[keep], mask[keep], pos[keep]
            cache.batch_select_indices(keep)
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)  # [b, T+1]
        pos = pos[:, -1:] + 1  # [b, 1]
        logits = target(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                        **cache_kwargs(target, cache)).logits[:, -1]
    return [{"prompt": p.cpu().clone(), "answer": torch.stack(o["answer"]),
             "label_ids": torch.stack(o["label_ids"]), "label_logp": torch.stack(o["label_logp"])}
            for p, o in zip(prompts, out)]
