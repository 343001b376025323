"""Fixtures and helpers shared by the test modules of acgate.models."""

import pytest

from acgate.data.dgp import simulate


@pytest.fixture(scope="module")
def panel(smoke_params):
    return simulate(smoke_params.synthetic, 0, smoke_params.split.val_start, smoke_params.split.test_start)


def quiet(_: str) -> None:
    pass
