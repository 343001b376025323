"""Fixtures shared by the test modules of acgate.audit."""

import dataclasses
from pathlib import Path

import pytest

from acgate.config import load_params

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small():
    """params/audit_calibration.yaml with 60 entities and fewer resamples: a replicate trains 20 small networks and 20
    closed-form fits."""
    p = load_params(ROOT / "params" / "audit_calibration.yaml")
    return dataclasses.replace(p, synthetic=dataclasses.replace(p.synthetic, n_entities=60),
                               train=dataclasses.replace(p.train, device="cpu"),
                               audit=dataclasses.replace(p.audit, permutations=300, bootstrap=300))
