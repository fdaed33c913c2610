"""Hugging Face runs as a user writes them; `eco_huggingface.py` runs each on openreg and on the CPU
and compares. Usage: hf_train.py CASE OUT [ARGS]. Cases:

  trainer PRECISION    transformers' Trainer on a small GPT-2 (PRECISION fp32 or bf16)
  resume CALLBACK      Trainer for 8 steps with a checkpoint at step 4, then a new Trainer resumed
                       from that checkpoint to step 8 (CALLBACK "callback": with OpenRegRNGState)
  accelerate PRECISION accelerate's Accelerator loop (PRECISION no or bf16)
  pretrained DEVICE_MAP from_pretrained(device_map=DEVICE_MAP) of a saved model, and its logits

The device comes from accelerate's variables (ACCELERATE_TORCH_DEVICE=openreg, set by the test) or
is the CPU. A forward pre-hook records, in every step, the device of the input and of the
parameters and whether autocast is on there; OUT gets the losses, the parameters, what the hook
saw."""

import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

from torch_openreg.transformers import OpenRegRNGState

STEPS = 8


def _model(dropout: float = 0.0) -> GPT2LMHeadModel:
    """A small GPT-2. Without dropout unless asked: the runs compared with the CPU draw no random
    numbers on the device, whose generator is not the CPU's (the CPU's drew the weights and, in
    Trainer, the sampler's seed)."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=96, n_positions=32, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, bos_token_id=0, eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def _dataset() -> list[dict]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 96, (STEPS * 4, 24), generator=generator)
    return [{"input_ids": row, "labels": row} for row in ids]


def _watch(model: GPT2LMHeadModel, seen: list) -> None:
    """Records each forward's input device, parameter device and autocast state, from inside the
    model's forward (accelerate's autocast wraps forward, which a hook on the model itself precedes)."""

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        device = next(module.parameters()).device
        seen.append((ids.device.type, device.type, torch.is_autocast_enabled(device.type)))

    model.transformer.register_forward_pre_hook(hook, with_kwargs=True)


def _arguments(out: str, **kwargs) -> transformers.TrainingArguments:
    kwargs.setdefault("save_strategy", "no")
    return transformers.TrainingArguments(
        output_dir=out + ".trainer",
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        seed=0,
        data_seed=0,
        **kwargs,
    )


def trainer(out: str, precision: str) -> dict:
    model, seen = _model(), []
    _watch(model, seen)
    args = _arguments(out, max_steps=STEPS, bf16=precision == "bf16")
    run = transformers.Trainer(model=model, args=args, train_dataset=_dataset())
    run.train()
    losses = [entry["loss"] for entry in run.state.log_history if "loss" in entry]
    return {
        "device": str(args.device),
        "losses": losses,
        "seen": seen,
        "params": {name: p.detach().cpu() for name, p in model.named_parameters()},
    }


def resume(out: str, rng_callback: str) -> dict:
    """With dropout: resuming equals training straight through only if the device's generators
    are restored too."""
    model = _model(dropout=0.1)
    args = _arguments(out, max_steps=STEPS, save_strategy="steps", save_steps=STEPS // 2)
    callbacks = [OpenRegRNGState()] if rng_callback == "callback" else []
    transformers.Trainer(model=model, args=args, train_dataset=_dataset(), callbacks=callbacks).train()
    straight = {name: p.detach().cpu() for name, p in model.named_parameters()}
    model, seen = _model(dropout=0.1), []
    _watch(model, seen)
    resumed = transformers.Trainer(model=model, args=args, train_dataset=_dataset(), callbacks=callbacks)
    resumed.train(resume_from_checkpoint=f"{out}.trainer/checkpoint-{STEPS // 2}")
    return {
        "device": str(args.device),
        "straight": straight,
        "params": {name: p.detach().cpu() for name, p in model.named_parameters()},
        "seen": seen,
    }


def accelerate_loop(out: str, precision: str) -> dict:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=precision)
    model, seen = _model(), []
    _watch(model, seen)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        _dataset(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(2)
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return {
        "device": str(accelerator.device),
        "losses": torch.stack(losses).cpu(),
        "seen": seen,
        "params": {name: p.detach().cpu() for name, p in accelerator.unwrap_model(model).named_parameters()},
    }


def pretrained(out: str, device_map: str) -> dict:
    _model().save_pretrained(out + ".model")
    model = GPT2LMHeadModel.from_pretrained(out + ".model", device_map=device_map)
    ids = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = model(input_ids=ids.to(model.device)).logits
    return {
        "devices": sorted({str(p.device) for p in model.parameters()}),
        "hf_device_map": getattr(model, "hf_device_map", None),
        "logits": logits.cpu(),
        "params": {name: p.detach().cpu() for name, p in model.named_parameters()},
    }


def main() -> None:
    case, out, *args = sys.argv[1:]
    cases = {"trainer": trainer, "resume": resume, "accelerate": accelerate_loop, "pretrained": pretrained}
    torch.save(cases[case](out, *args), out)


if __name__ == "__main__":
    main()
