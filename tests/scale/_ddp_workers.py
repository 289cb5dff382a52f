"""Functions run in the spawned ranks of ``test_ddp.py`` (importable by the children)."""

import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from skdml._training._distributed import distributed_context
from skdml.deep import DeepMetricTransformer
from skdml.deep._network import EmbeddingNet
from skdml.deep._trainable import DeepTrainable


def data(n_classes=8, per_class=6, dim=10, seed=0):
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    X = rng.randn(len(y), dim).astype(np.float32) + 2.0 * rng.randn(n_classes, dim)[y]
    return X, y


def backbone(input_shape):
    """A BatchNorm-free backbone: its output does not depend on how the batch is sharded."""
    return nn.Sequential(nn.Linear(input_shape[0], 16), nn.ReLU(), nn.Linear(16, 12))


def estimator(**kw):
    params = dict(backbone=backbone, n_components=4, max_iter=1, loader_params={"batches_per_epoch": 2},
                  n_classes_per_batch=4, n_samples_per_class=3, loss="binomial",
                  regularizer="ec", regularizer_weight=0.1,
                  early_stopping=False, optimizer="sgd", learning_rate=0.05, device="cpu",
                  random_state=0)
    params.update(kw)
    return DeepMetricTransformer(**params)


def one_step(loss, net_seed=0):
    """Loss and gradients of one step on the global batch ``X[:12]`` (classes 0..3)."""
    X, y = data()
    batch = np.concatenate([np.flatnonzero(y == c)[:3] for c in range(4)])
    ctx = distributed_context(torch.device("cpu"))
    share = len(batch) // ctx.world_size
    local = batch[ctx.rank * share:(ctx.rank + 1) * share]
    est = estimator(loss=loss)
    torch.manual_seed(net_seed)
    net = EmbeddingNet(backbone((10,)), 12, 4, True)
    objective = est._build_objective(8)
    trainable = DeepTrainable(net, ctx.objective(objective), torch.as_tensor(y),
                              input_shape=(10,), device=torch.device("cpu"),
                              forward=ctx.forward(net))
    total, _ = trainable.batch_loss((torch.as_tensor(X[local]), torch.as_tensor(local)))
    total.backward()
    return float(total), {k: p.grad.detach().clone() for k, p in net.named_parameters()}


def _init(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), SKDML_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def equivalence(rank, world_size, port, out_dir, losses, checkpoint):
    """One step per loss, then a whole (2-batch) fit with a checkpoint; rank 0 saves them."""
    _init(rank, world_size, port)
    try:
        steps = {loss: one_step(loss) for loss in losses}
        from skdml.metrics import distributed_retrieval_scores

        X, y = data(n_classes=5, per_class=7, seed=1)
        scores = distributed_retrieval_scores(X, y, k=[1, 3])
        est = estimator(checkpoint_path=checkpoint).fit(*data())
        # the input-preservation term on the global batch (it was each rank's shard's)
        preserving = estimator(preserve_input=1.0).fit(*data())
        # without a seed, every rank draws rank 0's plan: the classes of each rank's share
        from skdml._training import _distributed as D

        seen, original = [], D.DistributedClassBalancedBatchSampler.__iter__

        def record(sampler):
            for batch in original(sampler):
                seen.append(sorted(set(data()[1][np.asarray(batch)].tolist())))
                yield batch

        D.DistributedClassBalancedBatchSampler.__iter__ = record
        try:
            estimator(random_state=None, max_iter=2).fit(*data())
        finally:
            D.DistributedClassBalancedBatchSampler.__iter__ = original
        torch.save(seen, os.path.join(out_dir, f"classes_{rank}.pt"))
        if rank == 0:
            torch.save({"steps": steps, "history": est.history_, "scores": scores,
                        "state": est.module_.state_dict(),
                        "preserving": (preserving.history_, preserving.module_.state_dict())},
                       os.path.join(out_dir, "ddp.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


class _Failing(nn.Module):
    def __init__(self, input_shape, fail):
        super().__init__()
        self.layer, self.fail, self.calls = nn.Linear(input_shape[0], 12), fail, 0

    def forward(self, x):
        self.calls += 1
        if self.fail and self.calls > 2:  # the dry probe, the first batch, then fail
            raise RuntimeError("rank 1 failed on purpose")
        return self.layer(x)


def failing_rank(rank, world_size, port):
    """Rank 1 raises during its second training step; rank 0 waits in a collective."""
    _init(rank, world_size, port)
    est = estimator(backbone=lambda shape: _Failing(shape, fail=rank == 1), max_iter=3)
    est.fit(*data())


def nccl_smoke(rank, world_size, port, out_dir):
    """World size 1 on one GPU through NCCL: the distributed path of a CUDA fit."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        est = estimator(device="cuda").fit(*data())
        torch.save({"history": est.history_}, os.path.join(out_dir, "nccl.pt"))
    finally:
        dist.destroy_process_group()
