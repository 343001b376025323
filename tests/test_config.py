import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from acgate.config import (
    CLASSICAL_METHODS,
    GATE_METHODS,
    NAME_PATTERN,
    NEURAL_BASELINES,
    SECTIONS,
    Params,
    ParamsError,
    load_params,
    params_from_dict,
    read_settings,
    reference_markdown,
)

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, data: dict):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def base() -> dict:
    return yaml.safe_load((ROOT / "params" / "synthetic_linear.yaml").read_text())


@pytest.mark.parametrize("domain, scenario", [("synthetic_linear", "linear"), ("synthetic_nonlinear", "nonlinear")])
def test_locked_paper_values(domain, scenario):
    p = load_params(ROOT / "params" / f"{domain}.yaml")
    assert p.domain == domain and p.synthetic.scenario == scenario
    m, t = p.model, p.train
    assert (m.max_lag, m.hidden, m.lstm_layers, m.dropout) == (10, 64, 2, 0.05)
    assert (m.position_penalty, m.temperature, m.recon_weight, m.recon_detach) == (0.1, 1.0, 0.1, False)
    assert (t.lr, t.patience, t.max_epochs, t.grad_clip, t.device) == (1e-3, 20, 200, 1.0, "auto")
    assert p.n_seeds == 20 and p.methods == GATE_METHODS + NEURAL_BASELINES + CLASSICAL_METHODS
    s = p.synthetic
    assert (s.n_entities, s.n_steps, s.lag_horizon, s.noise_sd, s.lag_width) == (200, 30, 10, 0.15, 1.25)


def test_overlay_changes_only_what_it_names(smoke_params):
    full = load_params(ROOT / "params" / "synthetic_linear.yaml")
    assert smoke_params.model.max_lag == 5 and smoke_params.synthetic.n_entities == 40
    named = yaml.safe_load((ROOT / "params" / "smoke.yaml").read_text())
    for section, values in full.to_dict().items():  # every key the overlay leaves out keeps the base's value
        if isinstance(values, dict):
            for key, value in values.items():
                if key not in named.get(section, {}):
                    assert smoke_params.to_dict()[section][key] == value, f"{section}.{key}"
        elif section not in named:
            assert smoke_params.to_dict()[section] == values, section
    assert smoke_params.digest() != full.digest()


def test_the_block_of_a_training_step_leaves_finished_runs_current():
    """An epoch is the same optimiser step whatever train.block_entities is, so the setting is not part of the params
    hash: the paper's runs, hashed before it existed, stay current (e33da71d5a9a is their recorded hash)."""
    full = load_params(ROOT / "params" / "synthetic_linear.yaml")
    assert full.digest() == "e33da71d5a9a"
    blocked = dataclasses.replace(full, train=dataclasses.replace(full.train, block_entities=64))
    assert blocked.digest() == full.digest()
    assert dataclasses.replace(full, train=dataclasses.replace(full.train, lr=0.01)).digest() != full.digest()
    # a gate without memory is another model; the paper's (the default) hashes as before the setting existed
    assert dataclasses.replace(full, model=dataclasses.replace(full.model, gate_memory=False)).digest() \
        != full.digest()
    assert dataclasses.replace(full, model=dataclasses.replace(full.model, neural_dl_hidden=8)).digest() \
        != full.digest()  # neural_dl's width likewise


def test_unknown_key_names_the_key_and_the_allowed_keys(tmp_path):
    data = base()
    data.setdefault("model", {})["max_lags"] = 10
    with pytest.raises(ParamsError, match=r"unknown key 'model.max_lags'.*allowed keys in model: .*max_lag"):
        load_params(write(tmp_path, data))
    data = base()
    data["trian"] = {}
    with pytest.raises(ParamsError, match=r"unknown key 'trian'"):
        load_params(write(tmp_path, data))


def test_lag_too_long_for_the_training_window(tmp_path):
    data = base()
    data.setdefault("model", {})["max_lag"] = 22
    with pytest.raises(ParamsError, match=r"model.max_lag = 22 is too long .*22 steps.*must be in 2\.\.21"):
        load_params(write(tmp_path, data))


@pytest.mark.parametrize("value", [0, -1.0, "one"])
def test_non_positive_temperature(tmp_path, value):
    data = base()
    data.setdefault("model", {})["temperature"] = value
    with pytest.raises(ParamsError, match=r"model.temperature = .* must be a number > 0 \(tau"):
        load_params(write(tmp_path, data))


@pytest.mark.parametrize("section, key, value, allowed", [
    ("train", "device", "gpu", "one of auto, cpu, cuda"),
    ("model", "dropout", 1.0, r"a number in \[0, 1\)"),
    ("", "methods", ["acgate", "lstm"], "a non-empty list of distinct names"),
    ("split", "test_start", 30, "0 < val_start < test_start <= 29"),
    ("split", "test_start", 22, "split.test_start = 22 must be after split.val_start = 22"),
    ("audit", "alpha", 1.5, r"audit.alpha = 1.5 is not allowed: must be a number in \(0, 1\)"),
    ("audit", "l1_min_share", 0, r"audit.l1_min_share = 0.0 is not allowed: must be a number in \(0, 1\]"),
    ("", "domain", "../../../x", "domain = '../../../x' is not allowed: must be a plain name"),
    ("", "domain", "my-panel", "domain = 'my-panel' is not allowed: must be a plain name of letters, digits and _, "
                               r"at most 100 of them \(.*no -: write my_panel, not my-panel\)"),
    ("audit", "circular_threshold", 1.5, r"audit.circular_threshold = 1.5 .* must be a number in \(0, 1\]"),
    ("audit", "min_seed_agreement", 2.0, r"audit.min_seed_agreement = 2.0 .* must be a number in \[0, 1\]"),
    ("audit", "l3_min_spearman", -0.1, r"audit.l3_min_spearman = -0.1 .* must be a number in \[0, 1\]"),
    ("audit", "heterogeneity_comparators", ["shared_lag"], r"must be empty, or a list of distinct names from acgate"),
    ("audit", "reference", "tft", r"audit.reference = 'tft' .* one of acgate, .*moderated_dl"),
    # one lag: every k* is 1 and L1 "ruled out" said nothing; counts that only cost memory and time are bounded
    ("model", "max_lag", 1, r"model.max_lag = 1 .* an integer in 2..1_000 \(with one lag every k\* is 1"),
    ("audit", "permutations", 10**9, r"audit.permutations = 1000000000 .* an integer in 1..100_000"),
    ("audit", "bootstrap", 10**7, r"audit.bootstrap = 10000000 .* an integer in 1..100_000"),
    ("", "n_seeds", 10**6, r"n_seeds = 1000000 .* an integer in 1..1_000"),
])
def test_out_of_range_values(tmp_path, section, key, value, allowed):
    data = base()
    (data.setdefault(section, {}) if section else data)[key] = value
    with pytest.raises(ParamsError, match=allowed):
        load_params(write(tmp_path, data))


def test_a_column_named_twice_is_refused(tmp_path):
    """A proxy, feature or stratifier named twice doubled its columns in every design without a word (a fault trial
    of audit_panel)."""
    data = yaml.safe_load((ROOT / "params" / "example_panel.yaml").read_text())
    data["data"]["proxies"] = ["mean:capacity", "mean:capacity"]
    with pytest.raises(ParamsError, match=r"data.proxies = .* must be a list of at least 1 distinct column name"):
        load_params(write(tmp_path, data))


def test_the_workflow_matches_domain_names_with_the_params_checks_own_pattern():
    """The params check and the Snakefile's {domain} wildcard once differed ('-' passed one and failed the other with
    a MissingInputException): the Snakefile must constrain the wildcard with the constant the check uses."""
    snakefile = (ROOT / "workflow" / "Snakefile").read_text()
    constraints = re.search(r"^wildcard_constraints:\n((?:    .*\n)+)", snakefile, re.MULTILINE)
    assert constraints and re.search(r"^    domain=NAME_PATTERN,$", constraints[1], re.MULTILINE), constraints
    assert re.search(r"^from acgate.config import .*\bNAME_PATTERN\b", snakefile, re.MULTILINE)
    assert re.fullmatch(NAME_PATTERN, "synthetic_linear") and not re.fullmatch(NAME_PATTERN, "my-panel")


def test_full_share_is_allowed(tmp_path):
    data = base()
    data.setdefault("audit", {})["l1_min_share"] = 1.0
    assert load_params(write(tmp_path, data)).audit.l1_min_share == 1.0


def test_extends_cycles_and_lists_give_one_clear_line(tmp_path):
    (tmp_path / "self.yaml").write_text("extends: self.yaml\n")
    with pytest.raises(ParamsError, match=r"self.yaml: extends forms a cycle .*may not extend itself"):
        load_params(tmp_path / "self.yaml")
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ParamsError, match=r"extends forms a cycle \(.*a.yaml -> .*b.yaml -> .*a.yaml\)"):
        load_params(tmp_path / "a.yaml")
    (tmp_path / "typo.yaml").write_text("extends: bse.yaml\n")  # the file that points to a missing base is named
    with pytest.raises(ParamsError, match=r"typo.yaml: extends = 'bse.yaml', but .*bse.yaml does not exist"):
        load_params(tmp_path / "typo.yaml")
    (tmp_path / "list.yaml").write_text("extends: [a.yaml, b.yaml]\n")
    with pytest.raises(ParamsError, match=r"list.yaml: extends = \['a.yaml', 'b.yaml'\] must be one file name"):
        load_params(tmp_path / "list.yaml")
    (tmp_path / "dot.yaml").write_text("extends: .\n")  # a folder that exists was said "not to exist"
    with pytest.raises(ParamsError, match=r"dot.yaml: extends = '.' is the folder .*; name the params file"):
        load_params(tmp_path / "dot.yaml")
    with pytest.raises(ParamsError, match=r"is a folder; name a params file"):
        load_params(tmp_path)


def test_a_params_file_nested_or_sized_past_any_settings_file_is_refused(tmp_path):
    """100,000 nested lists ended in a bare RecursionError; a file of megabytes is no settings file."""
    (tmp_path / "deep.yaml").write_text("n_seeds: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ParamsError, match=r"deep.yaml: nested deeper than a settings file can be"):
        load_params(tmp_path / "deep.yaml")
    (tmp_path / "big.yaml").write_text("# x\n" * 400_000)
    with pytest.raises(ParamsError, match=r"big.yaml: 1_600_000 bytes, more than a params file holds"):
        load_params(tmp_path / "big.yaml")


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ParamsError, match="not found"):
        load_params(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(tmp_path / "bad.yaml")


def test_a_key_given_twice_or_an_alias_is_an_error_with_its_line(tmp_path):
    """The second of two model: sections silently replaced the first (max_lag back to 10); an alias can expand a 1 KB
    file into gigabytes. Both stop with the line and the fix."""
    base = (ROOT / "params" / "synthetic_linear.yaml").read_text()
    (tmp_path / "twice.yaml").write_text(base + "\nmodel:\n  max_lag: 4\n\nmodel:\n  hidden: 16\n")
    with pytest.raises(ParamsError, match=r"key 'model' is given twice \(first on line \d+\).*merge them"):
        load_params(tmp_path / "twice.yaml")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    (tmp_path / "bomb.yaml").write_text(bomb + "n_seeds: *i\n")
    with pytest.raises(ParamsError, match="an alias .* settings files take none"):
        load_params(tmp_path / "bomb.yaml")


def test_reference_documents_every_key():
    text = reference_markdown()
    for section, cls in SECTIONS.items():  # data and audit included, which a synthetic params file leaves at None
        for f in dataclasses.fields(cls):
            assert f"`{section}.{f.name}`" in text
    for f in dataclasses.fields(Params):
        assert f.name in SECTIONS or f"| `{f.name}` |" in text
    assert "`n_seeds`" in text and "a number > 0" in text
    # a key a params file must set says so instead of showing a default it never takes
    assert "| `data.loader` | required |" in text and "| `data.target` | required |" in text
    assert "| `data.csv_file` | `` |" in text  # an optional key keeps its default


def test_parameter_reference_is_current():
    reference = (ROOT / "docs" / "parameters.md").read_text()
    assert reference_markdown() in reference, "regenerate it with: python -m acgate.config docs/parameters.md"


@pytest.mark.parametrize("change, message", [
    ({"time_column": "region"}, r"data.entity_column and data.time_column both name column 'region'"),
    ({"static": ["region"]}, r"data.static names 'region', the entity column \(data.entity_column\)"),
    ({"stratifiers": ["first:region"]}, r"data.stratifiers names 'first:region', the entity column"),
])
def test_the_entity_column_is_no_data_and_no_time(change, message):
    """They ended in a bare KeyError, and in 'missing column' for a column the file has."""
    spec = yaml.safe_load((ROOT / "params" / "example_panel.yaml").read_text())
    spec["data"].update(change)
    with pytest.raises(ParamsError, match=message):
        params_from_dict(spec, "mine.yaml")


def test_plain_values_are_read_as_a_user_writes_them(tmp_path):
    """PyYAML reads YAML 1.1: `lr: 1e-3` and `epsilon: 1e-06` (the default as docs/parameters.md prints it) were
    strings, refused as "not a number"; `features: [NO]` became [False]; `domain: 0123` the octal 83. Read by
    YAML 1.2's rules, each is what it looks like."""
    data = base()
    data.setdefault("train", {}).update(lr="LR", stacked="STACKED")
    data.setdefault("audit", {}).update(epsilon="EPSILON")
    text = yaml.safe_dump(data).replace("LR", "1e-3").replace("STACKED", "off").replace("EPSILON", "1e-06")
    (tmp_path / "plain.yaml").write_text(text)
    params = load_params(tmp_path / "plain.yaml")
    assert params.train.lr == 0.001 and params.audit.epsilon == 1e-06 and params.train.stacked == "off"
    assert read_settings("features: [NO, yes]\ndomain: 0123\nn: 12\nflag: true\n") == {
        "features": ["NO", "yes"], "domain": "0123", "n": 12, "flag": True}
