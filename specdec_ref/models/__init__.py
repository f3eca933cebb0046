"""Models to speculate with: the offline pair, named Hub pairs, the distilled drafts and tiny enumerable
toys."""
from ..device import cache_dir
from .loading import (PAIRS, HubPair, auto_pair_name, check_fp16_safe, default_dtype, encode_chat,
                      load_hf_pair, load_offline_pair, load_offline_target, load_pair, placeholder_draft,
                      slice_vocab)

__all__ = ["PAIRS", "HubPair", "auto_pair_name", "cache_dir", "check_fp16_safe", "default_dtype",
           "encode_chat", "load_hf_pair", "load_offline_pair", "load_offline_target", "load_pair",
           "placeholder_draft", "slice_vocab"]
