"""The default method a drafter runs, chosen on this machine: calibrated costs (`models.method`) and the
head's recorded quality (quality.json beside its weights) -> the chain or tree with the best predicted
speedup, greedy and sampled separately, and the lines that tell the reader what was chosen and how to
override it.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .method import Costs, Method, calibrated_costs, choosable, choose, method_name


@dataclass
class Choice:
    """The default methods a drafter runs, and the numbers they were chosen from."""
    greedy: Method
    sampled: Method
    predicted: dict[str, dict[str, float]]  # "greedy" / "T=1" -> method name -> predicted speedup
    costs: Costs

    def summary(self) -> str:
        """Two lines for the reader: what runs by default, why, and how to choose otherwise."""
        g, s = method_name(self.greedy), method_name(self.sampled)
        pg, ps = self.predicted["greedy"][g], self.predicted["T=1"][s]
        c = self.costs
        text = (f"default method: {g} greedy (predicted {pg:.2f}×), {s} when sampling (predicted {ps:.2f}×); "
                f"from this machine's t(k)/t(1) = {c.verify_cost(2):.2f} (k=2), "
                f"{c.verify_cost(5):.2f} (k=5), {c.verify_cost(13):.2f} (k=13), "
                f"draft pass c₁ = {c.c_pass:.3f} ({max(c.c_first, c.c_pass):.3f} right after the target's; "
                f"each with the loop's work around it{one_call(c)}), "
                f"the rest of the loop's work h₀ = {c.h0:.3f} "
                f"(+ {c.h_node:.3f} per tree node; when sampling + {c.h_sampled:.3f} "
                f"+ {c.h_node_sampled:.3f} per node), and the head's recorded τ by method\n"
                "  override: speculative_generate(..., gamma=γ) or "
                "tree=sd.TreeBudget(depth, topk, n_nodes, stop=p); SPECDEC_CALIBRATE=0 skips the calibration")
        slower = plain_is_faster(pg, ps)
        return text if slower is None else text + "\n  " + slower


def one_call(costs: Costs) -> str:
    """", a chain of 2 drafted in one call 0.081" for each chain drafted in one call (`Costs.c_chain`), and
    ", a greedy tree 3 deep and 3 wide grown in one call 0.160" for each such tree (`Costs.c_tree`)."""
    return "".join([f", a chain of {g} drafted in one call {c:.3f}" for g, c in costs.c_chain.items()]
                   + [f", a greedy tree {s.split('/')[0]} deep and {s.split('/')[1]} wide grown in one call "
                      f"{c:.3f}" for s, c in costs.c_tree.items()])


def plain_is_faster(greedy: float, sampled: float) -> str | None:
    """A line for the reader when the best predicted speedup is below 1× (greedy, sampling or both): plain
    decoding is the faster method there; None otherwise."""
    where = [name for name, x in (("greedy", greedy), ("when sampling", sampled)) if x < 1.0]
    if not where:
        return None
    return (f"no method is predicted faster than plain decoding {' or '.join(where)} on this machine: "
            "sd.autoregressive_generate(target, ids, n) is the faster call there")


def choose_defaults(target, drafter, quality: dict, ids: torch.Tensor) -> Choice:
    """Calibrate (or read the cached costs) and pick the best recorded method for greedy and for sampling."""
    costs = calibrated_costs(target, drafter, ids)
    # per iteration, by method (older quality files lack them)
    passes, nodes = quality.get("draft_passes", {}), quality.get("draft_nodes", {})
    taus = {key: choosable(quality["tau"][key], drafter, key == "T=1") for key in ("greedy", "T=1")}
    greedy, pg = choose(taus["greedy"], costs, False, passes.get("greedy"), nodes.get("greedy"))
    sampled, ps = choose(taus["T=1"], costs, True, passes.get("T=1"), nodes.get("T=1"))
    return Choice(greedy, sampled, {"greedy": pg, "T=1": ps}, costs)


CALIBRATION_PROMPT = "Explain in a few sentences how a bicycle stays upright."  # not a held-out prompt


def default_methods(target, drafter, encode: Callable[[str], torch.Tensor],
                    quality_path: Path) -> dict | None:
    """{"greedy": method, "sampled": method, "choice": the `Choice`} for a drafter whose quality.json ships,
    chosen on this machine (calibrated on CALIBRATION_PROMPT, which `encode` turns into the target's chat
    input ids [1, T]); None (the drafter keeps its own default) without a quality file or with
    SPECDEC_CALIBRATE=0. Prints the choice."""
    if os.environ.get("SPECDEC_CALIBRATE", "1") == "0" or not quality_path.exists():
        return None
    ids = encode(CALIBRATION_PROMPT)
    choice = choose_defaults(target, drafter, json.loads(quality_path.read_text()), ids)
    print(choice.summary(), file=sys.stderr, flush=True)
    return {"greedy": choice.greedy, "sampled": choice.sampled, "choice": choice}
