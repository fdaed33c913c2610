"""transformers on openreg: `OpenRegRNGState`, the Trainer callback that checkpoints the openreg
generators. Trainer's device comes from accelerate's variables (docs/ecosystem.md); needs the
`transformers` package, and importing this module without it raises ImportError."""

from __future__ import annotations

import os

import torch
import transformers

_FILE = "openreg_rng_state.pth"


# [marker: hf-rng-callback]
class OpenRegRNGState(transformers.TrainerCallback):
    """`Trainer(..., callbacks=[OpenRegRNGState()])`: resuming from a checkpoint restores the openreg
    generators, so dropout after the checkpoint draws what an uninterrupted run draws. Trainer saves
    and restores the CPU's generator and CUDA's (and a few other devices'), never openreg's
    (transformers/trainer.py, _save_rng_state and _load_rng_state). This saves every openreg
    device's state beside Trainer's rng_state.pth, and restores it before the first step of a
    resumed run; no random number is drawn on the device in between."""

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        torch.save(torch.openreg.get_rng_state_all(), os.path.join(folder, _FILE))

    def on_train_begin(self, args, state, control, **kwargs):
        # On a resumed run Trainer has loaded the checkpoint's state (global_step) by now.
        saved = os.path.join(args.output_dir, f"checkpoint-{state.global_step}", _FILE)
        if state.global_step > 0 and os.path.exists(saved):
            torch.openreg.set_rng_state_all(torch.load(saved))


__all__ = ["OpenRegRNGState"]
