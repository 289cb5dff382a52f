"""The DeML network, its hook into EmbeddingNet, the preset estimator and bad configurations."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.base import clone
from torch import nn

from skdml.deep import DeML, EmbeddingNet, SmallCNN, SmallResNet, make_deml
from skdml.deep._network import build_optimizer
from skdml.deep.deml import crop_and_zoom, learner_similarity, split_backbone
from skdml.losses import DecoupledLoss
from skdml.metrics import recall_at_k
from skdml.deep import random_walk_attention
from skdml.deep._hooks import LayerCapture
from skdml.deep.deml import resize_attention

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

CUDA = torch.cuda.is_available()
SHAPE = (1, 16, 16)


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def cnn():
    return SmallCNN(1, widths=(4, 6, 8))


def deml(**kw):
    params = dict(n_scales=2, n_cams=2, n_components=16, crop_min_size=6)
    params.update(kw)
    return DeML.from_backbone(cnn(), SHAPE, **params)


def images(n=6, seed=0):
    return torch.rand(n, *SHAPE, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("I, J", list(itertools.product([1, 2, 3], [1, 2, 4])))
def test_shapes_and_terms_for_every_configuration(I, J):
    torch.manual_seed(0)
    net = deml(n_scales=I, n_cams=J, n_components=24)
    k = 24 // (I * J)
    assert net.learner_dim == k and net.embedding_dim == net.out_features == I * J * k
    x = images()
    z = net.eval()(x)
    assert z.shape == (6, I * J * k)
    parts = z.view(6, I * J, k)
    torch.testing.assert_close(parts.norm(dim=-1), torch.ones(6, I * J))
    features, aux = net.train()(x)
    assert features.shape == z.shape
    assert set(aux) == ({"adv", "act", "ntri"} if J > 1 else {"act", "ntri"})
    assert all(v.ndim == 0 and torch.isfinite(v) for v in aux.values())
    assert sum(v for v in aux.values()).requires_grad


def test_embedding_is_the_normalised_learner_outputs_in_order():
    """Eq. 1 and the evaluation rule: [CA_(1,1); ...; CA_(1,J); CA_(2,1); ...], each unit."""
    torch.manual_seed(1)
    net = deml().eval()
    x = images(seed=1)
    inside = net.look_inside(x)
    expected = []
    for scale, inp in zip(net.scales, inside["inputs"]):
        z, _ = scale(inp)
        expected += [F.normalize(z[j], dim=1) for j in range(net.n_cams)]
    torch.testing.assert_close(net(x), torch.cat(expected, dim=1))
    torch.testing.assert_close(inside["embedding"], net(x))


def test_look_inside_returns_the_attention_and_the_crops():
    torch.manual_seed(2)
    net = deml().train()
    x = images(4, seed=2)
    inside = net.look_inside(x.numpy())
    assert net.training  # mode restored
    assert [a.shape for a in inside["attention"]] == [(4, 16, 16)] * 2
    for a in inside["attention"]:
        torch.testing.assert_close(a.sum(dim=(1, 2)), torch.ones(4))
    (box,) = inside["boxes"]
    assert box.shape == (4, 4) and (box >= 0).all() and (box <= 1).all()
    assert ((box[:, 2] - box[:, 0]) * 16 >= 6 - 1e-4).all()
    torch.testing.assert_close(inside["inputs"][0], x)
    torch.testing.assert_close(inside["inputs"][1], crop_and_zoom(x, box))


def test_attention_layers_default_and_named():
    resnet = SmallResNet(1, widths=(4, 6, 8, 8), blocks_per_stage=1)
    net = DeML.from_backbone(resnet, SHAPE, n_scales=1, n_cams=2, n_components=8)
    assert net.attention_layers == ("gnet.0", "gnet.1")  # like inception4e and 5b
    assert len(net.scales[0].fnet) == 3  # stem, stages.0, stages.1
    net = deml(attention_layers=["fnet", "gnet.0.0"])
    assert net.attention_layers == ("fnet", "gnet.0.0")
    assert net.look_inside(images())["attention"][0].shape == (6, 16, 16)


def test_unified_baseline_has_no_attention_modules():
    net = deml(n_scales=1, n_cams=1, channel_attention=False, activation_decay=0.0,
               anti_trivial_weight=0.0)
    assert net.scales[0].cams is None and net.scales[0].adversary is None
    assert isinstance(net.train()(images()), torch.Tensor)  # no auxiliary term at all


def test_scales_do_not_share_weights():
    net = deml()
    a, b = (s.fnet[0][0][0].weight for s in net.scales)
    assert a is not b and torch.equal(a, b)  # same start (the user's CNN), own parameters


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_scales=3, n_cams=4, n_components=8), "n_components=8"),
    (dict(split="blocks.9"), "split='blocks.9'"),
    (dict(split="blocks.2"), "GNet empty"),
    (dict(attention_layers=["gnet.7"]), "attention_layers"),
    (dict(n_cams=2, channel_attention=False), "channel_attention"),
    (dict(crop_min_size=20), "crop_min_size=20"),
    (dict(n_scales=0), "n_scales"),
    (dict(crop_threshold=2.0), "crop_threshold"),
    (dict(adversary_weight=-1.0), "adversary_weight"),
    (dict(adversary_weight=float("inf")), "adversary_weight"),  # was NonFiniteLossError at fit
    (dict(adversary_hidden=0), "adversary_hidden"),  # was a constant adversary, its term 0
    (dict(adversary_hidden=2.5), "adversary_hidden"),  # was cut to 2
    (dict(adversary_hidden=-1), "adversary_hidden"),  # was a torch error at fit
])
def test_bad_configurations_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        deml(**kwargs)


def test_a_split_without_a_4d_map_is_refused():
    mlp_like = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 14 * 14, 8),
                             nn.ReLU())
    with pytest.raises(ValueError, match="fnet .*4-D map.*earlier split"):
        DeML.from_backbone(mlp_like, SHAPE, split="1", n_scales=1, n_cams=1, n_components=4)
    pooled = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3), nn.AdaptiveAvgPool2d(1),
                           nn.Flatten())
    with pytest.raises(ValueError, match="attention_layers must name modules that return 4-D"):
        DeML.from_backbone(pooled, SHAPE, split="0", attention_layers="gnet.2", n_scales=1,
                           n_cams=1, n_components=4)
    net = DeML.from_backbone(pooled, SHAPE, split="0", n_scales=2, n_cams=1, n_components=4,
                             crop_min_size=4)  # GNet pools itself: attention on gnet.0
    assert net.attention_layers == ("gnet.0",) and net.eval()(images()).shape == (6, 4)
    with pytest.raises(TypeError, match="SmallCNN, SmallResNet and nn.Sequential"):
        split_backbone(nn.Linear(3, 3))


def test_images_smaller_than_the_crop_are_refused_at_forward():
    net = deml(crop_min_size=12)
    with pytest.raises(ValueError, match="crop_min_size=12"):
        net(torch.rand(2, 1, 10, 10))
    with pytest.raises(ValueError, match=r"\(B, 1, H, W\)"):
        net(torch.rand(2, 3, 16, 16))


def test_embedding_net_hook_drops_the_head_and_gives_learners_the_head_rate():
    net = deml()
    emb = EmbeddingNet(net, net.embedding_dim, net.embedding_dim, normalize=True)
    assert isinstance(emb.head, nn.Identity)
    with pytest.raises(ValueError, match="set n_components=16"):
        EmbeddingNet(net, 16, 32, normalize=True)
    opt = build_optimizer(emb, None, optimizer="adam", learning_rate=1e-3, head_lr_mult=10.0,
                          param_groups=None, weight_decay=0.0)
    rate = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    for name, p in emb.named_parameters():
        expected = 1e-2 if ".learners." in name else 1e-3
        assert rate[id(p)] == pytest.approx(expected), name
    plain = EmbeddingNet(cnn(), 8, 3, normalize=True)  # other backbones keep their head
    assert isinstance(plain.head, nn.Linear)


def test_learner_similarity_against_a_loop():
    rng = np.random.RandomState(0)
    Z = rng.randn(5, 2 * 3 * 4)
    expected = []
    for n in range(5):
        parts = Z[n].reshape(2, 3, 4)
        for i in range(2):
            for j in range(3):
                for k in range(3):
                    if j != k:
                        a, b = parts[i, j], parts[i, k]
                        expected.append(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert learner_similarity(Z, 2, 3) == pytest.approx(np.mean(expected))
    assert np.isnan(learner_similarity(Z, 2, 1))


@pytest.fixture(scope="module")
def patterns():
    """12 classes of 16x16 images: a class-specific 5x5 glyph at a random place on noise."""
    rng = np.random.RandomState(0)
    glyphs = (rng.rand(12, 5, 5) > 0.5).astype(np.float32)
    y = np.repeat(np.arange(12), 16)
    X = 0.2 * rng.rand(len(y), 1, 16, 16).astype(np.float32)
    for i, c in enumerate(y):
        r, s = rng.randint(0, 12, size=2)
        X[i, 0, r:r + 5, s:s + 5] += glyphs[c]
    return X, y


def fast_deml(**kw):
    params = dict(n_components=16, widths=(8, 16, 16), deml_params={"crop_min_size": 8},
                  max_iter=2, loader_params={"batches_per_epoch": 4}, device="cpu", random_state=0,
                  learning_rate=1e-3, early_stopping=False)
    params.update(kw)
    return make_deml(**params)


def test_energy_confusion_is_refused_where_it_cannot_act(patterns):
    # EC's gradient reaches the embedding layer only; DeML's learners are its embedding, so
    # the term was computed, logged, added to the loss (+91 at weight 100) and changed nothing
    X, y = patterns
    with pytest.raises(ValueError, match="regularizer='ec' acts through the embedding layer"):
        fast_deml(n_scales=1, n_cams=2, regularizer="ec", regularizer_weight=1.0).fit(X[:64],
                                                                                     y[:64])


def test_preset_fits_transforms_pickles_and_clones(patterns):
    X, y = patterns
    est = fast_deml(n_scales=2, n_cams=2).fit(X[:96], y[:96])
    assert isinstance(est.loss_, DecoupledLoss) and est.loss_.n_learners == 4
    # the paper's training: 10x for the learners, no augmentation, a constant rate
    assert est.optimizer_params == {"head_lr_mult": 10.0, "lr_schedule": "constant"}
    assert est.augment is False
    assert isinstance(est.module_.head, nn.Identity)
    Z = est.transform(X[96:])
    assert Z.shape == (96, 16) and Z.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Z.reshape(96, 4, 4), axis=-1), 0.5, rtol=1e-5)
    assert {"aux_adv", "aux_act", "aux_ntri"} <= set(est.history_[-1])
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_allclose(again.transform(X[96:]), Z, rtol=1e-5, atol=1e-6)
    twin = clone(est)
    assert repr(twin.backbone) == repr(est.backbone) and "n_scales=2" in repr(est.backbone)
    np.testing.assert_allclose(twin.fit(X[:96], y[:96]).transform(X[96:]), Z, rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(ValueError, match="n_components=2"):
        make_deml(2, 2, n_components=2)
    with pytest.raises(ValueError, match="images"):
        fast_deml(n_scales=1, n_cams=2).fit(X[:96].reshape(96, -1), y[:96])


@pytest.mark.slow
def test_deml_learns_better_than_its_start(patterns):
    """Held-out glyphs of the training classes: the trained net against its own start."""
    X, y = patterns
    train = np.tile(np.arange(16) < 10, 12)
    before, after = [], []
    for seed in (0, 1):
        torch.manual_seed(seed)
        start = DeML.from_backbone(SmallCNN(1, widths=(8, 16, 16)), SHAPE, n_scales=2,
                                   n_cams=2, n_components=32, crop_min_size=8)
        with torch.no_grad():
            before.append(recall_at_k(start.eval()(torch.as_tensor(X[~train])).numpy(),
                                      y[~train], k=1))
        # the start is scored on raw inputs: train on raw inputs too (no learned
        # standardisation, augmentation, schedule or weight average), so that only DeML's
        # learning differs
        est = fast_deml(n_components=32, max_iter=6, loader_params={"batches_per_epoch": 10},
                        random_state=seed, standardize=False, augment=False,
                        optimizer_params={"lr_schedule": "constant", "ema_epochs": None})
        est.set_params(backbone=start, loss=DecoupledLoss(4)).fit(X[train], y[train])
        after.append(recall_at_k(est.transform(X[~train]), y[~train], k=1))
    assert min(a - b for a, b in zip(after, before)) > 0.05, (before, after)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_forward_on_cuda_under_autocast():
    net = deml().cuda().train()
    x = images().cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        features, aux = net(x)
    assert features.is_cuda and torch.isfinite(features.float()).all()
    sum(aux.values()).backward()


@pytest.mark.parametrize("n_scales, n_cams", [(0, 2), (-1, 2), (2, 0), (2.0, 2)])
def test_learner_similarity_names_a_bad_count(n_scales, n_cams):
    # ZeroDivisionError, numpy's reshape error, or a NaN as if J were 1
    with pytest.raises(ValueError, match="must be a positive integer"):
        learner_similarity(np.ones((2, 4)), n_scales, n_cams)


def test_build_optimizer_groups_loss_parameters_first_match_momentum_and_frozen():
    net = nn.Module()
    net.backbone = nn.Linear(3, 4)
    net.head = nn.Linear(4, 2)
    net.backbone.bias.requires_grad_(False)  # frozen: in no group
    loss = nn.Module()
    loss.proxies = nn.Parameter(torch.zeros(5, 2))
    opt = build_optimizer(net, loss, optimizer="sgd", learning_rate=0.1, head_lr_mult=10.0,
                          param_groups=[("head.weight", {"lr": 0.5}), ("head.*", {"lr": 0.7})])
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    assert lr_of[id(net.backbone.weight)] == 0.1
    assert id(net.backbone.bias) not in lr_of
    assert lr_of[id(loss.proxies)] == 0.1 * 10.0  # the loss's own parameters train at the head rate
    assert lr_of[id(net.head.weight)] == 0.5  # the first matching pattern wins
    assert lr_of[id(net.head.bias)] == 0.7
    assert all(g["momentum"] == 0.9 for g in opt.param_groups)  # documented: "sgd" uses 0.9


# audit 19 (mutation round 4): attention_boxes_adv


def test_attention_averages_every_layer_and_every_cam_branch():
    torch.manual_seed(3)
    net = deml(attention_layers=["fnet", "gnet.0"]).eval()
    x = images(4, seed=3)
    scale = net.scales[0]
    with torch.no_grad(), LayerCapture(scale, ["fnet", "gnet.0"]) as capture:
        scale(x)
        f_map, g_map = capture.outputs["fnet"], capture.outputs["gnet.0"]
    assert g_map.shape[0] == net.n_cams * 4  # one map per CAM branch
    walk = lambda m: random_walk_attention(m, n_steps=net.walk_steps)
    per_branch = torch.stack([walk(g) for g in g_map.view(net.n_cams, 4, *g_map.shape[1:])])
    expected = (resize_attention(walk(f_map), (16, 16))
                + resize_attention(per_branch.mean(dim=0), (16, 16))) / 2
    torch.testing.assert_close(net.look_inside(x)["attention"][0], expected)


def test_the_crops_of_three_scales_are_nested():
    torch.manual_seed(4)
    net = deml(n_scales=3, n_cams=1, n_components=12, crop_min_size=4).eval()
    x = images(6, seed=4)
    inside = net.look_inside(x)
    outer, inner = inside["boxes"]
    assert (inner[:, :2] >= outer[:, :2] - 1e-6).all()
    assert (inner[:, 2:] <= outer[:, 2:] + 1e-6).all()
    assert ((inner[:, 2] - inner[:, 0]) < (outer[:, 2] - outer[:, 0]) - 1e-3).any()  # zooms in
    torch.testing.assert_close(inside["inputs"][2], crop_and_zoom(x, inner))


def test_the_adversarial_term_is_weighted_by_adversary_weight():
    torch.manual_seed(5)
    net = deml(adversary_weight=1.0).train()
    x = images(4, seed=5)
    _, aux = net(x)
    net.adversary_weight = 2.5
    _, aux2 = net(x)
    assert float(aux["adv"]) != 0.0
    assert float(aux2["adv"]) == pytest.approx(2.5 * float(aux["adv"]), rel=1e-5)
