"""Data-parallel deep training with ``torch.distributed``: one global batch, shared by the ranks.

A deep fit launched by ``torchrun`` (or in processes that already called
``torch.distributed.init_process_group``) trains data-parallel:

* :class:`DistributedClassBalancedBatchSampler`: every rank draws the **same**
  global P x K plan (same seed) and keeps its own ``P / world_size`` classes of
  each batch, so the ranks see different classes of one global batch;
* :func:`all_gather_with_grad`: the loss sees the **global** batch. Embeddings
  and labels are gathered from every rank; the rank's own slice is the live
  tensor, so gradients flow back to it, as in pytorch-metric-learning's
  ``DistributedLossWrapper``. Pair and proxy losses therefore see the same
  pairs as one process;
* the input-preservation term (``preserve_input``) compares the gathered global
  batch with its gathered inputs, as one process would;
* a fit without ``random_state`` takes rank 0's seed (:func:`shared_seed`);
* the network is wrapped in ``DistributedDataParallel`` with a comm hook that
  **sums** the gradients (each rank back-propagates the same global loss through
  its own embeddings only; the sum of those is the one-process gradient, where
  DDP's default mean would divide it by the world size).

One DDP step with a global batch B therefore gives the loss and, after the
all-reduce, the gradients of one process with batch B (float32 rounding aside;
``tests/scale/test_ddp.py``). Only rank 0 writes checkpoints and shows progress;
every rank can resume from the checkpoint, which records the world size.
BatchNorm layers normalise each rank's shard (as under any DDP job).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from ._sampler import ClassBalancedBatchSampler

__all__ = ["DistributedContext", "DistributedClassBalancedBatchSampler",
           "all_gather_with_grad", "distributed_context", "is_main_process", "shared_seed"]


def _in_group():
    return dist.is_available() and dist.is_initialized()


def _world():
    if _in_group():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process():
    """Rank 0 of the process group, or of the launcher's ``RANK`` before the group exists.

    The one answer to "is this the process that writes checkpoints and shows
    progress" (:attr:`DistributedContext.is_main` is this process's answer once
    the fit has its context).

    Examples
    --------
    >>> is_main_process()
    True
    """
    if _in_group():
        return dist.get_rank() == 0
    return os.environ.get("RANK", "0") == "0"


def distributed_context(device):
    """The data-parallel context of this process (world size 1 outside a job).

    Under ``torchrun`` (``WORLD_SIZE > 1`` and ``RANK`` in the environment) the
    default process group is initialised here when the launcher's script has not
    done it: NCCL for a CUDA device, gloo on the CPU.

    Parameters
    ----------
    device : torch.device
        Where this rank trains.

    Returns
    -------
    context : DistributedContext

    Examples
    --------
    >>> ctx = distributed_context(torch.device("cpu"))
    >>> ctx.world_size, ctx.is_main
    (1, True)
    """
    if (not (dist.is_available() and dist.is_initialized())
            and int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ):
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = _world()
    return DistributedContext(rank, world, device, active=_in_group())


def shared_seed(seed, device):
    """``seed`` of rank 0, on every rank of a job (``seed`` itself outside one).

    A fit without ``random_state`` draws its seed from each process's own global
    generator, which differs between ranks: the ranks then drew different "global"
    batch plans (one class on two ranks of one batch) and different hold-outs.
    Initialises the process group under ``torchrun`` as :func:`distributed_context` does.

    Examples
    --------
    >>> shared_seed(7, torch.device("cpu"))
    7
    """
    context = distributed_context(device)
    if not context.active:
        return int(seed)
    where = device if dist.get_backend() == "nccl" else torch.device("cpu")
    value = torch.tensor([int(seed)], dtype=torch.int64, device=where)
    dist.broadcast(value, src=0)
    return int(value.item())


class DistributedContext:
    """What a fit needs to know and wrap to train on ``world_size`` ranks.

    ``active``: inside a process group (even of one rank, e.g. a 1-GPU NCCL smoke
    run), the fit goes through the distributed path.
    """

    def __init__(self, rank, world_size, device, active=None):
        self.rank, self.world_size, self.device = int(rank), int(world_size), device
        self.active = self.world_size > 1 if active is None else bool(active)

    @property
    def is_main(self):
        """Rank 0: the one that writes checkpoints and shows progress (:func:`is_main_process`)."""
        return self.rank == 0

    def batch_sampler(self, labels, P, K, random_state, n_batches=None):
        """The class-balanced plan: the rank's share of the global P x K batch."""
        if not self.active:
            return ClassBalancedBatchSampler(labels, P, K, random_state, n_batches=n_batches)
        return DistributedClassBalancedBatchSampler(labels, P, K, random_state,
                                                    n_batches=n_batches, rank=self.rank,
                                                    world_size=self.world_size)

    def objective(self, objective):
        """The objective evaluated on the global batch (identity on one rank)."""
        return objective if not self.active else GatheredObjective(objective)

    def forward(self, net):
        """The module to run the training forward pass through (DDP on several ranks)."""
        if not self.active:
            return None
        ids = [self.device.index or 0] if self.device.type == "cuda" else None
        ddp = torch.nn.parallel.DistributedDataParallel(net, device_ids=ids)
        ddp.register_comm_hook(state=None, hook=_sum_allreduce_hook)
        return ddp

    def check_resume(self, resume):
        """A checkpoint resumes only on the world size that wrote it."""
        saved = int(resume.world_size)
        if saved != self.world_size:
            raise ValueError(
                f"The checkpoint was written by a job of world size {saved}; this job has "
                f"world size {self.world_size}. The global batch plan and the random state "
                f"depend on it: resume with {saved} processes (torchrun --nproc-per-node="
                f"{saved}), or start afresh with another checkpoint_path.")


def _sum_allreduce_hook(state, bucket):
    """DDP comm hook: the **sum** of the ranks' gradients (DDP's default is the mean)."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


class DistributedClassBalancedBatchSampler(ClassBalancedBatchSampler):
    """The rank's share of a global class-balanced P x K plan.

    Every rank builds the same plan (same labels, same seed); each global batch
    of P classes x K samples is cut into ``world_size`` shards of
    ``P / world_size`` whole classes, and rank ``r`` yields shard ``r``. The
    shards of one batch, gathered in rank order, are the batch one process draws.

    Parameters
    ----------
    labels, n_classes_per_batch, n_samples_per_class, random_state, n_batches
        As for :class:`ClassBalancedBatchSampler` (the *global* plan).
    rank : int
        This process's rank.
    world_size : int
        Number of ranks; must divide ``n_classes_per_batch``.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.repeat(np.arange(6), 4)
    >>> plan = [DistributedClassBalancedBatchSampler(y, 4, 2, np.random.RandomState(0),
    ...                                              rank=r, world_size=2) for r in range(2)]
    >>> first = [next(iter(p)) for p in plan]
    >>> one = next(iter(ClassBalancedBatchSampler(y, 4, 2, np.random.RandomState(0))))
    >>> bool(np.array_equal(np.concatenate(first), one))
    True
    >>> set(y[first[0]]) & set(y[first[1]])
    set()
    """

    def __init__(self, labels, n_classes_per_batch, n_samples_per_class, random_state,
                 n_batches=None, *, rank, world_size):
        super().__init__(labels, n_classes_per_batch, n_samples_per_class, random_state,
                         n_batches=n_batches)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is not in [0, world_size={world_size}).")
        if self.n_classes_per_batch % world_size:
            raise ValueError(
                f"n_classes_per_batch={self.n_classes_per_batch} must be a multiple of the "
                f"world size {world_size}: each rank takes whole classes of the global batch.")
        self.rank, self.world_size = int(rank), int(world_size)

    def __iter__(self):
        share = self.n_classes_per_batch // self.world_size * self.n_samples_per_class
        start = self.rank * share
        for batch in super().__iter__():
            yield batch[start:start + share]


def all_gather_with_grad(tensor):
    """Concatenate ``tensor`` from every rank, in rank order; gradients reach the local part.

    The shards must have the same shape on every rank (the sampler's shards do).
    """
    rank, world = _world()
    if not _in_group():
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    dist.all_gather(parts, tensor.detach().contiguous())
    parts[rank] = tensor
    return torch.cat(parts)


class GatheredObjective:
    """Wrap a :class:`~skdml.losses.MetricObjective` to score the global batch."""

    def __init__(self, objective):
        self.inner = objective

    def __getattr__(self, name):  # loss, regularizer, regularized, weight...
        return getattr(self.inner, name)

    def __call__(self, embeddings, labels, *, regularizer_embeddings=None, layers=None):
        embeddings = all_gather_with_grad(embeddings)
        labels = all_gather_with_grad(labels)
        if regularizer_embeddings is not None:
            regularizer_embeddings = all_gather_with_grad(regularizer_embeddings)
        if layers is not None:
            layers = [all_gather_with_grad(layer) for layer in layers]
        return self.inner(embeddings, labels, regularizer_embeddings=regularizer_embeddings,
                          layers=layers)
