"""Loop overhead per target pass of our chain loop (LM draft, γ = 3, greedy, HELD_OUT[12:16] x 64 tokens):
wall time minus the time inside the models' forwards, per target pass. It uses only hooks on the models, so the
same script measures any commit of the package: `PYTHONPATH=<checkout> python scripts/loop_overhead.py`.
"""
import statistics, time, torch, sys, warnings
warnings.filterwarnings("ignore")
torch.set_num_threads(2)
import specdec_ref as sd
from specdec_ref.distill.prompts import HELD_OUT
from specdec_ref.models import offline_draft
target, tok = sd.load_offline_target(dtype=torch.float32)
lm = offline_draft.load(target)
mods = (target.base_model, target.get_output_embeddings(), lm.base_model, lm.get_output_embeddings())
rec = {"s": 0.0, "calls": 0}
st = {}
def pre(i):
    def h(m, a, k=None): st[i] = time.perf_counter()
    return h
def post(i):
    def h(m, a, o):
        rec["s"] += time.perf_counter() - st.pop(i)
        if i == 0: rec["calls"] += 1
    return h
for i, m in enumerate(mods):
    m.register_forward_pre_hook(pre(i)); m.register_forward_hook(post(i))
enc = [sd.encode_chat(tok, p) for p in HELD_OUT[12:16]]
vals = []
for ids in [enc[0]] + enc:
    rec["s"], rec["calls"] = 0.0, 0
    out = sd.speculative_generate(target, sd.ModelDrafter(lm), ids, 64, gamma=3, sampling=sd.SamplingConfig(0))
    vals.append((out.stats.seconds - rec["s"]) / rec["calls"] * 1e3)
print(sd.__file__, "overhead per target pass (ms):", round(statistics.median(vals[1:]), 2), [round(v, 2) for v in vals[1:]])
