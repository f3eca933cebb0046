"""GPU spec sheets, quoted from the vendors' data sheets (not measured), matched by the card's full name.

Chapters 1 and 6 compare measurements with them, and `models.gpu_plan` prices pairs with them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecSheet:
    """A GPU's numbers as printed on the vendor's spec sheet (not measured here)."""
    bandwidth: float  # bytes/s of HBM/GDDR bandwidth
    flops_16bit: float  # dense fp16/bf16 tensor-core FLOP/s (without the 2x "sparsity" figure)
    memory_gib: float  # memory on the card
    device_names: tuple[str, ...] = ()  # full names as torch.cuda.get_device_name reports them


SPEC_SHEETS = {  # vendor spec-sheet numbers, quoted, not measured (NVIDIA's data sheets for each card)
    "T4": SpecSheet(bandwidth=320e9, flops_16bit=65e12, memory_gib=16, device_names=("Tesla T4",)),
    "L4": SpecSheet(bandwidth=300e9, flops_16bit=121e12, memory_gib=24, device_names=("NVIDIA L4",)),
    "A100 40GB": SpecSheet(bandwidth=1.555e12, flops_16bit=312e12, memory_gib=40,
                           device_names=("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB")),
    "A100 80GB SXM": SpecSheet(bandwidth=2.039e12, flops_16bit=312e12, memory_gib=80,
                               device_names=("NVIDIA A100-SXM4-80GB",)),
    "H100 SXM": SpecSheet(bandwidth=3.35e12, flops_16bit=989e12, memory_gib=80,
                          device_names=("NVIDIA H100 80GB HBM3",)),
    "H200 SXM": SpecSheet(bandwidth=4.8e12, flops_16bit=989e12, memory_gib=141,
                          device_names=("NVIDIA H200",)),
}


def _normalise_gpu_name(name: str) -> str:
    return " ".join(name.lower().replace("-", " ").split())


def spec_sheet_for(device_name: str) -> tuple[str, SpecSheet] | None:
    """The spec sheet whose card has exactly this full name (`torch.cuda.get_device_name`) -> (key, sheet).

    Matching is by the whole name (case, hyphens and spaces aside), never by its first word: "NVIDIA
    A100-SXM4-40GB" and "NVIDIA A100-SXM4-80GB" have different sheets, and a card without a sheet here
    (an "NVIDIA A100 80GB PCIe", say) gets None rather than a neighbour's numbers.
    """
    wanted = _normalise_gpu_name(device_name)
    for key, sheet in SPEC_SHEETS.items():
        if any(_normalise_gpu_name(n) == wanted for n in sheet.device_names):
            return key, sheet
    return None
