"""Checkpoint and resume: a run killed after round 3 and resumed in a new process from its checkpoint equals the
uninterrupted run bit for bit (every model, optimizer state, alignment buffer, ledger and history); every
algorithm resumes exactly; client-count mismatches are errors."""

import subprocess
import sys
import textwrap

import pytest
import torch

from fsl_sage import ALGORITHMS, FSLSAGE, FSLConfig, digits_cnn_split

SETUP = textwrap.dedent(
    """
    import os, sys, torch
    from fsl_sage import FSLSAGE, FSLConfig, digits_cnn_split

    def crop(x):  # a random 1-pixel-padded crop and flip: the transform's randomness must resume too
        x = torch.nn.functional.pad(x, (1, 1, 1, 1))
        i, j = torch.randint(0, 3, (2,)).tolist()
        x = x[:, i : i + 8, j : j + 8]
        return x.flip(-1) if torch.rand(()) < 0.5 else x

    g = torch.Generator().manual_seed(0)
    data = [(torch.rand(37, 1, 8, 8, generator=g), torch.randint(0, 10, (37,), generator=g)) for _ in range(3)]
    ev = (torch.rand(40, 1, 8, 8, generator=g), torch.randint(0, 10, (40,), generator=g))
    cfg = FSLConfig(rounds=6, batch_size=8, server_update_interval=2, align_interval=2, align_epochs=2,
                    align_batch_size=16, buffer_size=20, seed=0)
    torch.manual_seed(0)
    algo = FSLSAGE(*digits_cnn_split(), cfg)
    """
)


def _python(code: str) -> None:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def _same_state(a, b, path="state"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_state(x, y, f"{path}[{i}]")
    elif path.split(".")[-1] != "wall_s":
        assert a == b or (a != a and b != b), path  # NaN == NaN here (no eval estimate)


@pytest.mark.slow  # two fresh interpreters (torch imports): ≈ 10 s idle, 36 s at load 9
def test_kill_after_round_3_and_resume_in_a_new_process_is_bit_identical(tmp_path):
    ck, final = tmp_path / "run.ckpt", tmp_path / "resumed.ckpt"
    # process 1: checkpoint after every round, killed (os._exit) right after round 3's checkpoint
    _python(SETUP + f"algo.fit(data, ev, transform=crop, checkpoint={str(ck)!r}, "
            "callback=lambda a, r: os._exit(0) if r.round == 2 else None)\nsys.exit(3)")  # fmt: skip
    assert torch.load(ck, weights_only=True)["round"] == 3
    # process 2: a fresh interpreter loads the checkpoint and runs rounds 4-6
    _python(SETUP + f"h = algo.fit(data, ev, transform=crop, resume={str(ck)!r})\n"
            f"assert [r.round for r in h.records] == list(range(6))\nalgo.save_checkpoint({str(final)!r})")  # fmt: skip
    # the uninterrupted run, here
    ns: dict = {}
    exec(SETUP, ns)
    ns["algo"].fit(ns["data"], ns["ev"], transform=ns["crop"])
    straight = ns["algo"].checkpoint_state()
    resumed = torch.load(final, weights_only=True)
    straight["rng"] = resumed["rng"]  # the test process drew other random numbers
    _same_state(straight, resumed)
    assert resumed["extra"]["align_log"]  # alignments (rounds 0, 2, 4) on both sides of the cut


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_every_algorithm_resumes_exactly(tmp_path, tiny_data, small_cfg, name, mode):
    if mode == "lazy" and name != "fsl_sage":
        pytest.skip("mode only matters to FSL-SAGE")
    data, ev = tiny_data
    cfg = FSLConfig(**{**small_cfg, "mode": mode})  # 4 rounds, l = 2
    torch.manual_seed(0)
    models = digits_cnn_split()
    straight = ALGORITHMS[name](*models, cfg)
    h = straight.fit(data, ev)
    first = ALGORITHMS[name](*models, cfg)
    with pytest.raises(_Stop):
        first.fit(data, ev, checkpoint=tmp_path / "ck", callback=_stop_after(1))
    second = ALGORITHMS[name](*models, cfg)
    h2 = second.fit(data, ev, resume=tmp_path / "ck")
    assert h2.accuracies == h.accuracies
    assert h2.cumulative_bytes == h.cumulative_bytes
    a, b = straight.checkpoint_state(), second.checkpoint_state()
    b["rng"] = a["rng"]
    _same_state(a, b)


class _Stop(Exception):
    pass


def _stop_after(t):
    def cb(algo, rec):
        if rec.round == t:
            raise _Stop

    return cb


def test_resume_and_load_check_the_client_count(tmp_path, tiny_data, small_cfg):
    data, _ = tiny_data
    torch.manual_seed(0)
    models = digits_cnn_split()
    cfg = FSLConfig(**{**small_cfg, "rounds": 1})
    algo = FSLSAGE(*models, cfg)
    algo.fit(data, checkpoint=tmp_path / "ck")
    algo.save(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="checkpoint has 3 clients, fit got 2"):
        FSLSAGE(*models, cfg).fit(data[:2], resume=tmp_path / "ck")
    with pytest.raises(ValueError, match="holds 3 clients, n_clients is 2"):
        FSLSAGE(*models, cfg).load(tmp_path / "w.safetensors", n_clients=2)
    two = FSLSAGE(*models, cfg)
    two.fit(data[:2])
    with pytest.raises(ValueError, match="holds 3 clients, this algorithm's clients is 2"):
        two.load(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match=r"align_interval \(3 here, 2 there\)"):
        FSLSAGE(*models, FSLConfig(**{**small_cfg, "align_interval": 3})).fit(data, resume=tmp_path / "ck")
    loaded = FSLSAGE(*models, cfg)
    loaded.load(tmp_path / "w.safetensors")
    with pytest.warns(UserWarning, match="resume="):
        loaded.fit(data)


@pytest.mark.parametrize("mode", ["eager", "lazy"])
@pytest.mark.parametrize("short", [1, 3])
def test_resume_with_more_rounds_equals_a_straight_run(tmp_path, tiny_data, small_cfg, mode, short):
    """A finished run of ``short`` rounds extended to 4: lazy mode skips the alignment after a run's last round
    (nothing follows it), so the extension must do it first. l = 2: round 0 (short = 1) and round 2 (short = 3)
    end with an alignment in the 4-round run."""
    data, ev = tiny_data
    cfg = FSLConfig(**{**small_cfg, "mode": mode})  # 4 rounds, l = 2
    torch.manual_seed(0)
    models = digits_cnn_split()
    straight = FSLSAGE(*models, cfg)
    h = straight.fit(data, ev)
    first = FSLSAGE(*models, FSLConfig(**{**small_cfg, "mode": mode, "rounds": short}))
    first.fit(data, ev, checkpoint=tmp_path / "ck")
    longer = FSLSAGE(*models, cfg)
    h2 = longer.fit(data, ev, resume=tmp_path / "ck")
    assert [r.alignments for r in h2.records] == [r.alignments for r in h.records]
    assert h2.cumulative_bytes == h.cumulative_bytes
    a, b = straight.checkpoint_state(), longer.checkpoint_state()
    b["rng"] = a["rng"]
    _same_state(a, b)
