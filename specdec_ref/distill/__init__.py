"""Draft training: prompts for the target to answer, distillation, and the side-by-side evaluation of a
draft."""
