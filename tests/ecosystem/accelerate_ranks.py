"""What accelerate's state says in each process of a `torchrun` launch on openreg (eco_huggingface.py):
`torchrun --nproc-per-node 2 accelerate_ranks.py OUT` with ACCELERATE_TORCH_DEVICE=openreg; each
rank writes its distributed type, process count and device to OUT.rankN."""

import json
import os
import sys

from accelerate import PartialState

state = PartialState()
rank = os.environ["RANK"]
with open(f"{sys.argv[1]}.rank{rank}", "w") as f:
    json.dump({"type": str(state.distributed_type), "processes": state.num_processes, "device": str(state.device)}, f)
