"""Tests of acgate.report.comparisons: the proxy-shuffle comparison and the verdict matrix."""

import pytest

from acgate.audit import domain_audit
from acgate.report import comparisons
from tests.conftest import make_domain, recovering


def test_proxy_shuffle_comparison_and_verdict_matrix(tmp_path, params):
    def shuffled(method, seed, z, rng):
        return 3 + 7 * rng.uniform(size=len(z))  # the gate no longer follows the entity

    make_domain(tmp_path, "d", range(5), ["acgate"], recovering, noise_proxy=True)
    make_domain(tmp_path, "d_proxy_shuffle", range(5), ["acgate"], shuffled, noise_proxy=True)
    a = domain_audit.audit_domain(params("d"), tmp_path / "runs", tmp_path / "data", 5, ["acgate"])
    b = domain_audit.audit_domain(params("d_proxy_shuffle"), tmp_path / "runs", tmp_path / "data", 5, ["acgate"])
    table = comparisons.proxy_shuffle_comparison(a, b).set_index(["run", "stratifier"])
    assert table.loc[("original", "latent_z"), "mean_abs_rho"] > 0.9
    drop = table.loc[("proxy shuffle", "latent_z"), "mean_abs_rho_drop"]
    assert drop == pytest.approx(table.loc[("original", "latent_z"), "mean_abs_rho"]
                                 - table.loc[("proxy shuffle", "latent_z"), "mean_abs_rho"])
    assert drop > 0.6
    matrix = comparisons.verdict_matrix([a, b])
    assert matrix.loc[("d", "acgate"), ("paper", "L2")] == "supported"
    assert matrix.loc[("d_proxy_shuffle", "acgate"), ("paper", "L2")] == "not certified"
    assert matrix.loc[("d", "acgate"), ("calibrated", "L2")] == "not certified"  # no comparators for the calibrated L1
