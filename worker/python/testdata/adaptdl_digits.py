"""An AdaptDL training script, written only with AdaptDL's public API
(adaptdl.torch, adaptdl.checkpoint, adaptdl.env), as a user would have it.
test_pollux_torch.PortTest changes its imports to pollux and runs it under
the launcher: the port from AdaptDL is an import change."""

import argparse
import pickle

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

import adaptdl.checkpoint
import adaptdl.env
import adaptdl.torch


class BestAccuracy(adaptdl.checkpoint.State):
    """The user's own checkpointed state."""

    def __init__(self):
        super().__init__("best-accuracy")
        self.value = 0.0

    def save(self, fileobj):
        pickle.dump(self.value, fileobj)

    def load(self, fileobj):
        self.value = pickle.load(fileobj)


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

adaptdl.torch.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
torch.manual_seed(0)

digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
trainset = torch.utils.data.TensorDataset(x[:1500], y[:1500])
validset = torch.utils.data.TensorDataset(x[1500:], y[1500:])
trainloader = adaptdl.torch.AdaptiveDataLoader(trainset, batch_size=32, shuffle=True, drop_last=True)
trainloader.autoscale_batch_size(256, local_bsz_bounds=(8, 64), gradient_accumulation=True)
validloader = adaptdl.torch.AdaptiveDataLoader(validset, batch_size=64, shuffle=False)

net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
net = adaptdl.torch.AdaptiveDataParallel(net, optimizer, lr_scheduler)
best = BestAccuracy()
adaptdl.checkpoint.load_state(best)

for epoch in adaptdl.torch.remaining_epochs_until(args.epochs):
    net.train()
    stats = adaptdl.torch.Accumulator()
    for inputs, targets in trainloader:
        optimizer.zero_grad()
        loss = F.cross_entropy(net(inputs), targets)
        loss.backward()
        optimizer.step()
        stats["loss_sum"] += loss.item() * targets.size(0)
        stats["total"] += targets.size(0)
        batch_size = trainloader.current_batch_size  # None outside the loop, as in AdaptDL
    lr_scheduler.step()
    net.eval()
    with torch.no_grad():
        for inputs, targets in validloader:
            stats["correct"] += (net(inputs).argmax(1) == targets).sum().item()
            stats["valid"] += targets.size(0)
    with stats.synchronized():
        accuracy = stats["correct"] / stats["valid"]
        best.value = max(best.value, accuracy)
        if adaptdl.env.replica_rank() == 0:
            print("epoch %d of %d replicas: batch size %d, loss %.3f, accuracy %.3f" % (
                adaptdl.torch.current_epoch(), adaptdl.env.num_replicas(),
                batch_size, stats["loss_sum"] / stats["total"], accuracy), flush=True)
if adaptdl.env.replica_rank() == 0:
    print("best accuracy %.3f" % best.value, flush=True)
