"""Data: any torch Dataset (torchvision style) with a random-crop transform, in process and on the Flower apps
(equal to each other), TensorDataset == tensors, label dtypes, every client's shapes checked, the flwr-run app's
task from the run config."""

import sys
import types

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict

from fsl_sage import FSLSAGE, FedAvg, FSLConfig, client_datasets, digits_cnn_split
from fsl_sage.data import ClientData
from fsl_sage.flower import LocalGrid, make_client_app, run_server

CFG = FSLConfig(
    rounds=2,
    batch_size=8,
    server_update_interval=2,
    align_interval=1,
    align_epochs=2,
    align_batch_size=16,
    buffer_size=20,
    mode="lazy",
    seed=0,
)


class FolderStyle(torch.utils.data.Dataset):
    """A torchvision-style data set: items (image tensor, int label), a ``targets`` list, its own transform."""

    def __init__(self, x, y, transform=None):
        self.x, self.targets, self.transform = x, [int(v) for v in y], transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img = self.x[i]
        return (self.transform(img) if self.transform else img), self.targets[i]


def random_crop(x, pad=1):
    """RandomCrop(8, padding=1) + horizontal flip on a (C, H, W) tensor, on torch's global RNG (as torchvision)."""
    h, w = x.shape[-2:]
    x = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    i, j = torch.randint(0, 2 * pad + 1, (2,)).tolist()
    x = x[..., i : i + h, j : j + w]
    return x.flip(-1) if torch.rand(()) < 0.5 else x


def _model_fn():
    torch.manual_seed(0)
    return digits_cnn_split()


def _params(algo_or_sd):
    return {k: v.clone() for k, v in algo_or_sd.items()}


def test_dataset_with_random_crop_in_process_equals_flower(tiny_data):
    data, ev = tiny_data
    sets = [FolderStyle(x, y) for x, y in data]
    algo = FSLSAGE(*_model_fn(), CFG)
    hist = algo.fit(sets, FolderStyle(*ev), transform=random_crop)
    app = make_client_app(_model_fn, lambda pid, n: sets[pid], CFG, transform=random_crop)
    strat, result = run_server(LocalGrid(app, 3), _model_fn, CFG, CFG.rounds, 3, eval_data=ev)
    flwr = dict(result.arrays.to_torch_state_dict())
    for k, v in algo.clients[0].state_dict().items():
        torch.testing.assert_close(v, flwr[k], atol=1e-6, rtol=1e-5)
    for k, v in algo.server.state_dict().items():
        torch.testing.assert_close(v, strat.server.state_dict()[k], atol=1e-6, rtol=1e-5)
    assert strat.ledger.by_kind() == algo.ledger.by_kind()
    assert result.evaluate_metrics_serverapp[CFG.rounds]["accuracy"] == pytest.approx(hist.accuracies[-1])
    # the crops do something: without the transform the run differs
    plain = FSLSAGE(*_model_fn(), CFG)
    plain.fit(sets)
    assert not torch.equal(plain.clients[0][0].weight, algo.clients[0][0].weight)


def test_torchvision_random_crop_runs_and_repeats(tiny_data):
    v2 = pytest.importorskip("torchvision.transforms.v2")
    data, _ = tiny_data
    aug = v2.Compose([v2.RandomCrop(8, padding=1), v2.RandomHorizontalFlip()])
    runs = [FedAvg(*_model_fn()[:2], None, CFG) for _ in range(2)]
    for r in runs:
        r.fit([FolderStyle(x, y) for x, y in data], transform=aug)
    assert torch.equal(runs[0].clients[0][0].weight, runs[1].clients[0][0].weight)  # seeded per batch


def test_tensor_dataset_and_datasets_equal_tensors(tiny_data):
    data, ev = tiny_data
    ref = FSLSAGE(*_model_fn(), CFG)
    ref.fit(data, ev)
    for wrap in (lambda x, y: torch.utils.data.TensorDataset(x, y), FolderStyle):
        algo = FSLSAGE(*_model_fn(), CFG)
        algo.fit([wrap(x, y) for x, y in data], ev)
        for k, v in ref.clients[0].state_dict().items():
            assert torch.equal(v, algo.clients[0].state_dict()[k]), k
        assert algo.history.accuracies == ref.history.accuracies


def test_labels_promoted_or_rejected_with_the_client_named(tiny_data):
    data, _ = tiny_data
    ref = FSLSAGE(*_model_fn(), CFG)
    ref.fit(data)
    int32 = FSLSAGE(*_model_fn(), CFG)
    int32.fit([(x, y.to(torch.int32)) for x, y in data])  # crashed inside nll_loss before
    assert torch.equal(int32.server[1].weight, ref.server[1].weight)
    bad = [data[0], (data[1][0], data[1][1].float()), data[2]]
    with pytest.raises(ValueError, match=r"client_datasets\[1\].*labels must be integers"):
        FSLSAGE(*_model_fn(), CFG).fit(bad)
    with pytest.raises(ValueError, match=r"client_datasets\[2\]: labels must lie in \[0, 9\]"):
        FSLSAGE(*_model_fn(), CFG).fit([data[0], data[1], FolderStyle(data[2][0], data[2][1] + 10)])


def test_every_clients_shapes_are_checked(tiny_data):
    data, _ = tiny_data
    nine = (torch.rand(37, 1, 9, 9), data[2][1])  # 9×9 images: z is 32×5×5, the server expects 512 floats
    with pytest.raises(ValueError, match=r"client_datasets\[2\]: inputs of shape \(1, 9, 9\) do not fit"):
        FSLSAGE(*_model_fn(), CFG).fit([data[0], data[1], nine])


def test_client_data_batches_are_seeded_and_labels_int64(tiny_data):
    (x, y), _ = tiny_data[0][0], None
    d = ClientData(FolderStyle(x, y.to(torch.int16)), transform=random_crop)
    idx = torch.arange(8)
    a, ya = d.batch(idx, key=5)
    b, _ = d.batch(idx, key=5)
    c, _ = d.batch(idx, key=6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert ya.dtype == torch.int64 and torch.equal(ya, y[:8])
    state = torch.get_rng_state()
    d.batch(idx, key=7)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's RNG is left alone
    # numpy scalars as Dirichlet α
    parts = client_datasets(x, y, 2, alpha=np.float32(1.0), seed=0)
    assert sum(len(p[1]) for p in parts) == 36


def test_flwr_run_app_reads_a_user_task(tiny_data, monkeypatch):
    from fsl_sage.flower import app as flower_app

    data, ev = tiny_data
    mod = types.ModuleType("my_fsl_task")
    mod.make = lambda rc: flower_app.FlowerTask(_model_fn, lambda pid, n: FolderStyle(*data[pid]), ev, random_crop)
    monkeypatch.setitem(sys.modules, "my_fsl_task", mod)
    rc = {"task": "my_fsl_task:make", "num-server-rounds": 2, "num-clients": 3, "batch-size": 8,
          "server-update-interval": 2, "align-interval": 1, "align-epochs": 2, "align-batch-size": 16,
          "buffer-size": 20, "seed": 0}  # fmt: skip
    grid = LocalGrid(flower_app.client_app, 3, run_config=rc)
    out = {}
    monkeypatch.setattr(
        flower_app, "run_server", lambda *a, **k: out.setdefault("r", run_server(*a, **k)), raising=True
    )
    flower_app._main(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=rc))
    strat, result = out["r"]
    algo = FSLSAGE(*_model_fn(), flower_app.config_from_run_config(rc))
    algo.fit([FolderStyle(*d) for d in data], transform=random_crop)
    for k, v in algo.server.state_dict().items():
        torch.testing.assert_close(v, strat.server.state_dict()[k], atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="task must be"):
        flower_app.load_task({"task": "mnist"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_argument_matches_cpu(tiny_data):
    data, ev = tiny_data
    cpu = FSLSAGE(*_model_fn(), CFG)
    h_cpu = cpu.fit(data, ev, transform=random_crop)
    gpu = FSLSAGE(*_model_fn(), CFG, device="cuda")
    h_gpu = gpu.fit(data, ev, transform=random_crop)
    assert h_gpu.cumulative_bytes == h_cpu.cumulative_bytes
    for k, v in cpu.server.state_dict().items():
        torch.testing.assert_close(gpu.server.state_dict()[k].cpu(), v, atol=1e-4, rtol=1e-3)


def _image_folder(root, x, y, **kw):
    """A real torchvision ``DatasetFolder`` (the ImageFolder machinery) over .npy images in class folders 0..9."""
    folder = pytest.importorskip("torchvision.datasets").DatasetFolder
    for i, (img, c) in enumerate(zip(x, y.tolist())):
        (root / str(c)).mkdir(parents=True, exist_ok=True)
        np.save(root / str(c) / f"{i:04d}.npy", img.numpy())
    for c in range(10):  # every class folder exists, so class_to_idx is the identity on 0..9
        (root / str(c)).mkdir(parents=True, exist_ok=True)
        np.save(root / str(c) / "pad.npy", np.zeros((1, 8, 8), np.float32))
    return folder(str(root), loader=lambda p: torch.from_numpy(np.load(p)), extensions=(".npy",), **kw)


def test_torchvision_target_transform_relabels_training_and_evaluation(tiny_data, tmp_path):
    """torchvision applies ``target_transform`` in ``__getitem__``, after ``.targets``: the labels trained on and
    evaluated against are the items' labels, not ``.targets``."""
    data, ev = tiny_data
    relabel = lambda t: 9 - t  # noqa: E731
    sets = [_image_folder(tmp_path / f"c{i}", x, y, target_transform=relabel) for i, (x, y) in enumerate(data)]
    evset = _image_folder(tmp_path / "ev", *ev, target_transform=relabel)
    for ds in sets + [evset]:
        items = torch.tensor([ds[i][1] for i in range(len(ds))])
        assert not torch.equal(torch.as_tensor(ds.targets), items)  # the relabelling is real
        assert torch.equal(ClientData(ds).labels, items)
    # training on the folder equals training on its items as tensors (same order, item labels)
    tensors = [(torch.stack([ds[i][0] for i in range(len(ds))]), ClientData(ds).labels) for ds in sets]
    ev_items = [evset[i] for i in range(len(evset))]
    ev_t = (torch.stack([v[0] for v in ev_items]), torch.tensor([v[1] for v in ev_items]))
    ref = FSLSAGE(*_model_fn(), CFG)
    ref.fit(tensors, ev_t)
    algo = FSLSAGE(*_model_fn(), CFG)
    algo.fit(sets, evset)
    for k, v in ref.server.state_dict().items():
        assert torch.equal(v, algo.server.state_dict()[k]), k
    assert algo.history.accuracies == ref.history.accuracies


def test_targets_that_disagree_with_the_items_are_not_trusted(tiny_data):
    (x, y), _ = tiny_data[0][0], None

    class Stale(FolderStyle):  # a custom Dataset whose __getitem__ relabels without a target_transform
        def __getitem__(self, i):
            return self.x[i], (self.targets[i] + 1) % 10

    assert torch.equal(ClientData(Stale(x, y)).labels, (y + 1) % 10)


def test_misspelt_run_config_key_is_refused_by_name():
    from fsl_sage.flower import app as flower_app

    rc = {"num-server-rounds": 2, "server-update-intervall": 3, "seed": 0}
    with pytest.raises(ValueError, match=r"'server-update-intervall' \(did you mean 'server-update-interval'\?\)"):
        flower_app.config_from_run_config(rc)
    ok = {"num-server-rounds": 2, "server-update-interval": 3, "align_interval": 2, "my-task.size": 4}
    cfg = flower_app.config_from_run_config(ok)  # underscores and a user task's nested table are fine
    assert (cfg.rounds, cfg.server_update_interval, cfg.align_interval) == (2, 3, 2)
