"""Data-parallel deep training on the CPU: 2 processes, gloo, spawned with a timeout.

Nothing here runs on a GPU (no NCCL run): the same code path takes NCCL when
the device is CUDA, see doc/scaling.md.
"""

import socket
import sys
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import _ddp_workers as workers  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")
WORLD = 2
TIMEOUT = 120
LOSSES = ("binomial", "triplet", "npair", "amsoftmax")


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn, *args, world=WORLD):
    """Run ``fn(rank, world, port, *args)`` in ``world`` processes; fail, never hang, past TIMEOUT."""
    ctx = mp.start_processes(fn, args=(world, _port(), *args), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + TIMEOUT
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"the ranks did not finish within {TIMEOUT} s (hang)")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    checkpoint = out / "fit.ckpt"
    _spawn(workers.equivalence, str(out), LOSSES, str(checkpoint))
    return torch.load(out / "ddp.pt", weights_only=False), checkpoint, out


@pytest.mark.parametrize("loss", LOSSES)
def test_ddp_step_equals_one_process_step(ddp_run, loss):
    """Global batch B over 2 ranks: same loss, and after the all-reduce the same gradients."""
    ddp_loss, ddp_grads = ddp_run[0]["steps"][loss]
    one_loss, one_grads = workers.one_step(loss)  # this process: world size 1
    assert ddp_loss == pytest.approx(one_loss, rel=1e-5, abs=1e-6)
    assert set(ddp_grads) == set(one_grads)
    for name, g in one_grads.items():
        assert g.abs().max() > 0, name  # a gradient that is all zeros proves nothing
        torch.testing.assert_close(ddp_grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_ddp_fit_equals_one_process_fit(ddp_run):
    saved = ddp_run[0]
    one = workers.estimator().fit(*workers.data())
    ddp_losses = [r["loss"] for r in saved["history"]]
    np.testing.assert_allclose(ddp_losses, [r["loss"] for r in one.history_], rtol=1e-5)
    for name, value in one.module_.state_dict().items():
        torch.testing.assert_close(saved["state"][name], value, rtol=1e-4, atol=1e-6,
                                   msg=name)


def test_the_input_preservation_term_sees_the_global_batch(ddp_run):
    # computed on each rank's shard, the term (and so the loss and the weights) differed
    # from one process's
    history, state = ddp_run[0]["preserving"]
    one = workers.estimator(preserve_input=1.0).fit(*workers.data())
    np.testing.assert_allclose([r["preserve_input"] for r in history],
                               [r["preserve_input"] for r in one.history_], rtol=1e-5)
    np.testing.assert_allclose([r["loss"] for r in history], [r["loss"] for r in one.history_],
                               rtol=1e-5)
    for name, value in one.module_.state_dict().items():
        torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_without_a_seed_the_ranks_share_one_batch_plan(ddp_run):
    # each rank seeded itself from its own global generator: one class on two ranks of a batch
    out = ddp_run[2]
    shares = [torch.load(out / f"classes_{rank}.pt") for rank in range(WORLD)]
    assert len(shares[0]) == len(shares[1]) > 0
    for mine, theirs in zip(*shares):
        assert not set(mine) & set(theirs)


def test_checkpoint_written_by_rank_0_records_world_size(ddp_run):
    _, checkpoint, _ = ddp_run
    assert checkpoint.exists()
    assert [p.name for p in checkpoint.parent.iterdir() if "fit.ckpt" in p.name] == ["fit.ckpt"]
    est = workers.estimator(checkpoint_path=str(checkpoint), warm_start=True, max_iter=2)
    with pytest.raises(ValueError, match="world size 2; this job has world size 1"):
        est.fit(*workers.data())
    assert not hasattr(est, "module_")  # the failed resume left the estimator unfitted


def test_retrieval_scores_shared_by_ranks_equal_one_process(ddp_run):
    from skdml.metrics import retrieval_scores

    X, y = workers.data(n_classes=5, per_class=7, seed=1)
    assert ddp_run[0]["scores"] == retrieval_scores(X, y, k=[1, 3])


def test_a_rank_that_raises_stops_every_rank():
    start = time.monotonic()
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 failed on purpose"):
        _spawn(workers.failing_rank)
    assert time.monotonic() - start < TIMEOUT


def test_sampler_needs_whole_classes_per_rank():
    from skdml._training._distributed import DistributedClassBalancedBatchSampler

    with pytest.raises(ValueError, match="multiple of the world size 2"):
        DistributedClassBalancedBatchSampler(np.repeat(np.arange(5), 3), 3, 2,
                                             np.random.RandomState(0), rank=0, world_size=2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not dist.is_nccl_available(),
                    reason="needs a CUDA device and NCCL")
def test_nccl_world_size_1_smoke(tmp_path):
    _spawn(workers.nccl_smoke, str(tmp_path), world=1)
    ddp = torch.load(tmp_path / "nccl.pt", weights_only=False)["history"]
    one = workers.estimator(device="cuda").fit(*workers.data()).history_
    np.testing.assert_allclose([r["loss"] for r in ddp], [r["loss"] for r in one], rtol=1e-4)


def test_the_rank_check_fingerprints_integer_labels_in_their_own_dtype():
    # labels above 2**53 that differ by one hashed alike through float64, so ranks holding
    # different labels passed the check; a tensor and an array of one set now agree
    import numpy as np
    import torch

    from skdml.metrics._sharded import fingerprint

    B = 2**53
    assert fingerprint(torch.tensor([B, 7])) != fingerprint(torch.tensor([B + 1, 7]))
    assert fingerprint(torch.tensor([0, 1])) == fingerprint(np.array([0, 1]))
    assert fingerprint(torch.zeros(3)) == fingerprint(np.zeros(3, dtype=np.float32))


def test_shard_tiling_check_refuses_a_missing_gapped_or_repeated_shard():
    # the guard of sharded/distributed scores: never average a partial or doubled set of queries
    from skdml.metrics._sharded import _check_tiling

    ok = [{"rows": (0, 3)}, {"rows": (3, 6)}, {"rows": (6, 10)}]
    _check_tiling(ok, 10)
    _check_tiling(ok[::-1], 10)  # any order
    for parts in (ok[:2],                 # the last shard lost
                  [ok[0], ok[2]],         # a gap in the middle
                  ok[1:],                 # the first shard lost
                  ok + [ok[1]]):          # a shard counted twice
        with pytest.raises(ValueError, match="missing or repeated"):
            _check_tiling(parts, 10)


def test_the_rank_check_fingerprints_the_shape_and_dtype_not_only_the_bytes():
    # two ranks holding the same bytes in another shape or dtype hold different inputs
    from skdml.metrics._sharded import fingerprint

    assert fingerprint(np.zeros(6)) != fingerprint(np.zeros((2, 3)))
    assert fingerprint(np.zeros((3, 2))) != fingerprint(np.zeros((2, 3)))
    assert fingerprint(np.zeros(2, dtype=np.int64)) != fingerprint(np.zeros(2))
    assert fingerprint(np.zeros((2, 3))) == fingerprint(np.zeros((2, 3)))
