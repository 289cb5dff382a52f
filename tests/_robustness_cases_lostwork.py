"""Audit cases of the checkpoint and lost-work family: see tests/_robustness_cases.py.

A crafted checkpoint with a valid digest, unwritable checkpoint paths, two fits on one
checkpoint path, an interrupted first linear fit, warm starts that cannot resume, and a
deep fit whose batches can hold no positive pair.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import tempfile

from _robustness_cases import (Case, Missing, Refused, Wrong, blobs, check,  # noqa: F401
                               check_interrupted_fit_unfitted, deep,
                               linear, read_checkpoint, set_params, tiny_backbone, tiny_images)


class _MakesAFolder:
    """Unpickling it calls ``os.mkdir(marker)``: what a crafted checkpoint could run."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _crafted_checkpoint(tmp, state):
    """A file with skdml's own header and a valid SHA-256 digest over ``torch.save(state)``."""
    import torch
    from skdml._training import _checkpoint

    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    path = os.path.join(tmp, "crafted.ckpt")
    with open(path, "wb") as fh:
        fh.write(_checkpoint.MAGIC + hashlib.sha256(payload).digest() + payload)
    return path


def crafted_checkpoint_load():
    from skdml._training import load_checkpoint
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "ran")
        path = _crafted_checkpoint(tmp, {"format": "skdml-deep", "epoch": _MakesAFolder(marker)})
        try:
            load_checkpoint(path)
        finally:
            check(not os.path.exists(marker), "load_checkpoint ran code from a crafted file")
        check(False, "a checkpoint holding a pickled callable was loaded")


def crafted_checkpoint_warm_start():
    X, y = tiny_images()
    with tempfile.TemporaryDirectory() as tmp:
        marker = os.path.join(tmp, "ran")
        path = _crafted_checkpoint(tmp, {"format": "skdml-deep", "model": _MakesAFolder(marker)})
        try:
            deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path,
                 warm_start=True).fit(X, y)
        finally:
            check(not os.path.exists(marker), "a warm_start fit ran code from a crafted file")
        check(False, "a warm_start fit accepted a crafted checkpoint")


def checkpoint_folder_is_a_file():
    X, y = tiny_images()
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "afile"), "w").close()
        deep(backbone=tiny_backbone(), max_iter=1,
             checkpoint_path=os.path.join(tmp, "afile", "ck.pt")).fit(X, y)
        check(False, "a checkpoint_path under a file was accepted")


def checkpoint_disk_full_mid_fit():
    from skdml._training import _checkpoint
    X, y = tiny_images()
    real, calls = _checkpoint.atomic_write_bytes, []

    def disk_fills_after_epoch_1(path, data):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    _checkpoint.atomic_write_bytes = disk_fills_after_epoch_1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            est = deep(backbone=tiny_backbone(), max_iter=2, early_stopping=False,
                       checkpoint_path=os.path.join(tmp, "ck.pt")).fit(X, y)
    finally:
        _checkpoint.atomic_write_bytes = real
    check(est.n_iter_ == 2, f"the fit kept {getattr(est, 'n_iter_', 0)} of 2 epochs")
    check(est.transform(X).shape[0] == len(X), "the fitted network was lost")


def checkpoint_two_fits_one_path():
    import torch
    X, y = tiny_images()
    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck.pt")

        class SecondFit(torch.nn.Module):  # starts a second fit on the path mid-epoch
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(64, 16)

            def forward(self, x):
                if self.training and not seen:
                    try:
                        deep(backbone=tiny_backbone(), max_iter=1, checkpoint_path=path).fit(X, y)
                        seen.append(None)
                    except Exception as exc:  # noqa: BLE001 - re-raised below
                        seen.append(exc)
                return self.lin(x.flatten(1))

        deep(backbone=SecondFit(), max_iter=1, checkpoint_path=path).fit(X, y)
    if seen and seen[0] is not None:
        raise seen[0]
    check(False, "two fits trained into one new checkpoint_path, overwriting each other")


def ecaml_interrupted_first_fit():
    X, y = blobs()
    calls = []

    def loss(Z, labels):
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return (Z ** 2).mean()

    est = linear("ECAML", n_components=3, loss=loss, max_iter=5, solver="adam")
    check_interrupted_fit_unfitted(est, X, y, "after Ctrl-C in a first fit, transform ran")


def _saved_run(tmp):
    X, y = tiny_images()
    path = os.path.join(tmp, "ck.pt")
    deep(backbone=tiny_backbone(), n_components=8, max_iter=1, checkpoint_path=path,
         early_stopping=False).fit(X, y)
    return path, X, y


def warm_start_new_n_components():
    with tempfile.TemporaryDirectory() as tmp:
        path, X, y = _saved_run(tmp)
        deep(backbone=tiny_backbone(), n_components=4, max_iter=2, checkpoint_path=path,
             warm_start=True, early_stopping=False).fit(X, y)
    check(False, "warm_start with another n_components was accepted")


def warm_start_new_backbone():
    with tempfile.TemporaryDirectory() as tmp:
        path, X, y = _saved_run(tmp)
        deep(backbone=tiny_backbone(n_out=32), n_components=8, max_iter=2,
             checkpoint_path=path, warm_start=True, early_stopping=False).fit(X, y)
    check(False, "warm_start with another backbone was accepted")


def checkpoint_missing_key():
    from skdml._training import save_checkpoint
    with tempfile.TemporaryDirectory() as tmp:
        path, X, y = _saved_run(tmp)
        state = read_checkpoint(path)
        del state["optimizer"]
        save_checkpoint(path, state)  # a valid digest over an incomplete state
        deep(backbone=tiny_backbone(), n_components=8, max_iter=2, checkpoint_path=path,
             warm_start=True, early_stopping=False).fit(X, y)
    check(False, "a checkpoint without its optimiser state was resumed")


def deep_single_sample_classes():
    X, y = tiny_images(6, 1)
    deep(backbone=tiny_backbone(), max_iter=1).fit(X, y)
    check(False, "a deep fit where every class has one sample trained with no positive pair")


CASES = [
    Case("checkpoint crafted to run code: load_checkpoint", "insecure", crafted_checkpoint_load),
    Case("checkpoint crafted to run code: warm_start fit", "insecure",
         crafted_checkpoint_warm_start),
    Case("checkpoint_path under a file (found before training)", "lost",
         checkpoint_folder_is_a_file),
    Case("checkpoint write fails mid-fit (disk full)", "lost", checkpoint_disk_full_mid_fit),
    Case("two fits on one new checkpoint_path", "lost", checkpoint_two_fits_one_path),
    Case("ECAML Ctrl-C in a first fit, then transform", "lost", ecaml_interrupted_first_fit),
    Case("warm_start with another n_components", "obscure", warm_start_new_n_components),
    Case("warm_start with another backbone", "obscure", warm_start_new_backbone),
    Case("checkpoint with a key removed (valid digest)", "obscure", checkpoint_missing_key),
    Case("deep fit, every class one sample", "silent", deep_single_sample_classes),
]
