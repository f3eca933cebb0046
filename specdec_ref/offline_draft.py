"""The distilled draft for the offline target (see `specdec_ref.train_draft`).

Until trained weights ship in specdec_ref/weights/offline_draft/, `available()` is False
and `load_offline_pair` falls back to a clearly labelled placeholder.
"""
from __future__ import annotations

from pathlib import Path

WEIGHTS_DIR = Path(__file__).parent / "weights" / "offline_draft"


def available() -> bool:
    return (WEIGHTS_DIR / "config.json").exists()


def load(target):
    raise NotImplementedError("no trained offline draft ships yet")
