from pathlib import Path

import pytest

from acgate.config import Params, load_params

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smoke_params() -> Params:
    """The linear synthetic domain under the smoke profile: 40 entities, 20 steps, K = 5, 15 epochs."""
    return load_params(ROOT / "params" / "synthetic_linear.yaml", ROOT / "params" / "smoke.yaml")
