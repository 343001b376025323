import dataclasses

import numpy as np
import pandas as pd
import pytest

from acgate.data.dgp import load_or_simulate, simulate
from acgate.data.panel import Normalisers, Panel, PanelError, Standardiser


@pytest.fixture
def panel(smoke_params):
    return simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)


def test_split_masks_are_chronological_after_the_warm_up(panel):
    K = 5
    labels = panel.target_split(K)
    assert len(labels) == len(panel.times) - K
    target_times = panel.times[K:]
    assert set(target_times[labels == "train"]) == set(range(5, 14))
    assert set(target_times[labels == "val"]) == {14, 15, 16}
    assert set(target_times[labels == "test"]) == {17, 18, 19}
    masks = panel.split_masks(K)
    assert sum(m.sum() for m in masks.values()) == panel.n_entities * (len(panel.times) - K)


def test_unobserved_targets_are_masked_not_filled(panel):
    panel.Y[0, 6] = np.nan
    masks = panel.split_masks(5)
    assert not masks["train"][0, 1] and masks["train"][1, 1]


def test_normalisers_use_the_training_window_only(panel):
    before = Normalisers.fit(panel)
    panel.Y[:, panel.times >= panel.val_start] += 1000.0
    panel.X[:, panel.times >= panel.val_start] *= 50.0
    after = Normalisers.fit(panel)
    np.testing.assert_array_equal(before.Y.mean, after.Y.mean)
    np.testing.assert_array_equal(before.X.scale, after.X.scale)
    train = panel.times < panel.val_start
    np.testing.assert_allclose(after.Y.mean, panel.Y[:, train].mean(), rtol=1e-5)


def test_constant_training_column_is_centred_not_exploded():
    values = np.array([[5.0, 5.0, 5.0, 9.0], [5.0, 5.0, 5.0, -3.0]])[:, :, None]
    s = Standardiser.fit(values[:, :3], (0, 1), ["x"], "feature")
    assert s.scale[0] == 1.0 and s.mean[0] == 5.0
    np.testing.assert_allclose(s.transform(values)[:, 3, 0], [4.0, -8.0])
    np.testing.assert_allclose(s.inverse(s.transform(values)), values)


def test_save_and_load_round_trip(panel, tmp_path):
    panel.save(tmp_path)
    back = Panel.load(tmp_path)
    for name in ("X", "Y", "P", "S", "times", "entities"):
        np.testing.assert_array_equal(getattr(back, name), getattr(panel, name))
    np.testing.assert_array_equal(back.truth["kstar_true"], panel.truth["kstar_true"])
    assert back.stratifiers.index.tolist() == panel.entities.tolist()
    assert back.digest() == panel.digest()
    assert not list(tmp_path.glob("*.tmp"))


def test_a_panel_file_edited_after_saving_is_refused_naming_it(panel, tmp_path):
    """A stratifier table permuted after prep (the audit would read it) and a truncated panel.npz (training would fail
    inside numpy's zip reader) are both refused at load, naming the file and the fix."""
    panel.save(tmp_path)
    table = pd.read_csv(tmp_path / "stratifiers.csv")
    table.iloc[:, 1:] = table.iloc[::-1, 1:].to_numpy()
    table.to_csv(tmp_path / "stratifiers.csv", index=False)
    with pytest.raises(PanelError, match=r"stratifiers\.csv was changed or damaged after the panel was saved.*"
                                         r"delete the folder and rerun"):
        Panel.load(tmp_path)
    panel.save(tmp_path)
    data = (tmp_path / "panel.npz").read_bytes()
    (tmp_path / "panel.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(PanelError, match=r"panel\.npz was changed or damaged"):
        Panel.load(tmp_path)
    (tmp_path / "panel.npz").unlink()
    with pytest.raises(PanelError, match=r"panel\.npz is missing"):
        Panel.load(tmp_path)
    (tmp_path / "panel.json").write_text('{"entities": [')
    with pytest.raises(PanelError, match=r"panel\.json is damaged"):
        Panel.load(tmp_path)


def test_a_damaged_synthetic_panel_is_drawn_again(smoke_params, tmp_path, capsys):
    first = load_or_simulate(smoke_params, 0, tmp_path)
    folder = next(tmp_path.rglob("panel.npz")).parent
    (folder / "panel.npz").write_bytes(b"not a zip file")
    again = load_or_simulate(smoke_params, 0, tmp_path)
    assert again.digest() == first.digest()
    assert "drawing it again from seed 0" in capsys.readouterr().err
    Panel.load(folder)  # the redrawn copy is whole
    (folder / "dgp_settings.json").write_text('{"synthetic": ')  # cut short
    assert load_or_simulate(smoke_params, 0, tmp_path).digest() == first.digest()


def test_contract_violations_name_the_field_and_entity(panel):
    X = panel.X.copy()
    X[3, 2, 0] = np.nan
    with pytest.raises(PanelError, match=r"panel.X: missing .* entity 'e003' in column 'x'"):
        dataclasses.replace(panel, X=X)
    P = panel.P.copy()
    P[:, 1] = 0.5
    with pytest.raises(PanelError, match=r"proxy 'sqrt_z' is the same for every entity"):
        dataclasses.replace(panel, P=P)
    Y = panel.Y.copy()
    Y[5, 7] = np.inf
    with pytest.raises(PanelError, match=r"panel.Y: infinite target for entity 'e005' at time 7"):
        dataclasses.replace(panel, Y=Y)
    with pytest.raises(PanelError, match=r"val_start \(25\)"):
        dataclasses.replace(panel, val_start=25, test_start=26)
    with pytest.raises(PanelError, match="split 'train' has no observed target after the 16 warm-up steps"):
        panel.split_masks(16)


def test_ids_that_look_missing_or_numeric_survive_a_round_trip(panel, tmp_path):
    ids = np.array(["NA", "null", "001", "1", "", "nan"] + [f"e{i}" for i in range(panel.n_entities - 6)])
    named = dataclasses.replace(panel, entities=ids,
                                stratifiers=panel.stratifiers.set_axis(pd.Index(ids, name="entity")))
    named.save(tmp_path)
    back = Panel.load(tmp_path)
    assert back.entities.tolist() == ids.tolist() and back.stratifiers.index.tolist() == ids.tolist()


def test_digest_follows_the_data_and_each_entitys_proxies(panel):
    """Two entities' proxies exchanged (a user correcting mislabelled rows) is another panel: runs trained on the
    first gave each entity the other's lag and were kept as current while the digest took the proxies as a set."""
    swapped = panel.P.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert dataclasses.replace(panel, P=swapped).digest() != panel.digest()
    for name in ("X", "Y", "S", "P"):  # a small change to any array a run trains on gives another digest
        values = getattr(panel, name).copy()
        values.flat[0] += 1e-3
        assert dataclasses.replace(panel, **{name: values}).digest() != panel.digest(), name
    assert dataclasses.replace(panel, times=panel.times + 1).digest() != panel.digest()
    assert dataclasses.replace(panel, entities=panel.entities[::-1].copy()).digest() != panel.digest()
