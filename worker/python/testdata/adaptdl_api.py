"""An AdaptDL-style script that uses every AdaptDL name pollux provides
(docs/adaptdl-compat.md), written against adaptdl.* as a user would;
test_adaptdl_compat renames the imports to pollux.* and runs it under the
launcher with 1 and 2 processes, then again to restart from its
checkpoint. It writes what it saw to <out>/rank-<r>-run-<n>.json."""

import argparse
import json
import operator
import os
import pickle

import torch
import torch.distributed as dist

import adaptdl
import adaptdl.checkpoint
import adaptdl.collective
import adaptdl.env
import adaptdl.torch
from adaptdl.torch.gradient_noise_scale import GradientNoiseScale
from adaptdl.torch.iterator import AdaptiveBPTTIterator
from adaptdl.torch.scaling_rules import AdamScale, AdaScale, LEGWScale, LinearScale, ScalingRuleBase, SqrtScale

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--run", type=int, default=0)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--rule", default="adascale")
args = parser.parse_args()
seen = {}


class Notes(adaptdl.checkpoint.State):
    """A user's state with the default (pickled) save and load."""

    def __init__(self):
        super().__init__("notes")
        self.runs = []


class HalfLinear(ScalingRuleBase):
    def scale_lr(self, scale):
        return 1 + (scale - 1) / 2


class Writer:
    """A SummaryWriter stand-in: what to_tensorboard writes."""

    def __init__(self):
        self.tags = {}

    def add_scalar(self, tag, value, step):
        self.tags[tag] = float(value)


torch.manual_seed(0)
x = torch.randn(96, 4)
y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(96)
dataset = torch.utils.data.TensorDataset(x, y)

# AdaptDL allows all of these before init_process_group.
loader = adaptdl.torch.AdaptiveDataLoader(dataset, batch_size=16, shuffle=True, drop_last=True)
loader.autoscale_batch_size(64, local_bsz_bounds=(4, 32), gradient_accumulation=True)
valid = adaptdl.torch.AdaptiveDataLoader(dataset, batch_size=32)
stats = adaptdl.torch.Accumulator()
notes = Notes()
adaptdl.checkpoint.load_state(notes)
seen["before_init"] = [adaptdl.torch.current_epoch(), adaptdl.torch.finished_epochs(),
                       loader.current_batch_size, adaptdl.torch.current_dataloader()]

adaptdl.torch.init_process_group("gloo")
dist.barrier()  # a real process group, one process included
rank, world = adaptdl.env.replica_rank(), adaptdl.env.num_replicas()
seen["env"] = {"rank": rank, "world": world, "nodes": adaptdl.env.num_nodes(),
               "restarts": adaptdl.env.num_restarts(), "master_addr": adaptdl.env.master_addr(),
               "master_port": adaptdl.env.master_port(), "checkpoint": adaptdl.env.checkpoint_path(),
               "share": adaptdl.env.share_path(), "job": adaptdl.env.job_id()}
seen["collective"] = [adaptdl.collective.allreduce(rank + 1),
                      adaptdl.collective.allreduce_async({"r%d" % rank: 1}, lambda a, b: {**a, **b}).result(),
                      adaptdl.collective.broadcast("from-%d" % rank),
                      adaptdl.collective.allreduce([rank], operator.add)]

acc = adaptdl.torch.Accumulator(base=1)
acc["x"] += 1
acc["x"] += 2
acc.update(x=10)
acc.subtract(x=4)
acc += {"y": 5}
acc -= {"y": 2}
with acc.synchronized():
    seen["accumulator"] = {"x": acc["x"], "y": acc["y"], "base": acc["base"], "repr": repr(acc), "len": len(acc)}

model = torch.nn.Linear(4, 1)
if args.rule == "adamscale":
    optimizer, rule = torch.optim.Adam(model.parameters(), lr=0.01), AdamScale()
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rule = {"adascale": AdaScale, "linear": LinearScale, "sqrt": SqrtScale, "half": HalfLinear,
            "legw": lambda: LEGWScale(1, len(dataset))}[args.rule]()
model = adaptdl.torch.AdaptiveDataParallel(model, optimizer, None, None, rule)

tb = Writer()
for epoch in adaptdl.torch.remaining_epochs_until(args.epochs):
    seen.setdefault("epochs", []).append(adaptdl.torch.current_epoch())
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb).squeeze(1), yb)
        loss.backward()
        optimizer.step()
        stats["loss_sum"] += loss.item() * len(yb)
        stats["n"] += len(yb)
        seen["in_loop"] = [loader.current_batch_size, loader.current_local_bsz, loader.accumulation_steps,
                           loader.training, adaptdl.torch.current_dataloader() is loader]
    loader.to_tensorboard(tb, epoch, tag_prefix="Data")
    model.to_tensorboard(tb, epoch, tag_prefix="Model/")
    with torch.no_grad():
        for xb, yb in valid:
            stats["valid_sum"] += torch.nn.functional.mse_loss(model(xb).squeeze(1), yb, reduction="sum").item()
            stats["valid_n"] += len(yb)
    with stats.synchronized():
        seen["valid_loss"] = stats["valid_sum"] / stats["valid_n"]
        seen["train_n"] = stats["n"]
        stats.clear()
seen["after_loop"] = [loader.current_batch_size, adaptdl.torch.finished_epochs(), adaptdl.torch.current_epoch()]
seen["tensorboard"] = sorted(tb.tags)
gns = model.gns
seen["gns"] = [isinstance(gns, GradientNoiseScale), gns.sqr_avg() >= 0, gns.var_avg() > 0, gns.gain(2.0) >= 1]
seen["gain"] = model.gain

notes.runs.append(args.run)
seen["notes"] = list(notes.runs)
path = adaptdl.checkpoint.save_state(notes)
if rank == 0:
    seen["save_state"] = sorted(os.listdir(path))
fresh = Notes.__new__(Notes)
fresh.name = "probe"
seen["load_state_unknown"] = adaptdl.checkpoint.load_state(fresh)

sampler = adaptdl.torch.ElasticSampler(dataset, shuffle=True)
sampler.set_epoch(3)
seen["sampler"] = sorted(adaptdl.collective.allreduce(list(sampler)))

tokens = torch.arange(1000)
bptt = AdaptiveBPTTIterator(tokens, batch_size=4 * world, bptt_len=5)
rows = []
for text, target in bptt:
    assert torch.equal(text + 1, target) and text.shape[1] == 4, (text.shape, target.shape)
    rows.append(int(text[0, 0]))
seen["bptt"] = sorted(adaptdl.collective.allreduce(rows))
adaptdl.checkpoint.save_all_states()

with open(os.path.join(args.out, "rank-%d-run-%d.json" % (rank, args.run)), "w") as f:
    json.dump(seen, f, default=repr)
