"""What lets ``make test`` run on parallel workers: which tests share a worker
(``conftest.worker_group``; a module with clusters of its own may not use the session
cluster), and the local cluster's port choice within ``CLUSTERMQ_PORT_RANGE``, which keeps two
workers (each given its own range by tests/conftest.py) from being handed one
port.

The ranges here lie above every worker's block (conftest.WORKER_PORTS_FROM on) and below the
kernel's ephemeral ports, so no cluster of the running suite holds them."""

from __future__ import annotations

import socket

import pytest

from clustermq.devtools.localcluster.ports import PORT_RANGE_ENV, free_port_pairs, free_ports, port_range
from conftest import _check_own_cluster, worker_group


@pytest.mark.parametrize("nodeid,group", [
    ("tests/test_reader.py::test_x[classic]", "classic"),
    ("tests/test_bad_input.py::test_x[artemis-masterslave:({nope})]", "artemis"),
    ("tests/test_reader.py::test_x[1000-classic]", "classic"),
    ("tests/test_units.py::test_x", "tests/test_units.py"),
    ("tests/test_units.py::test_x[classical-1]", "tests/test_units.py"),
    ("tests/test_units.py::TestA::test_x[a]", "tests/test_units.py"),
    ("tests/test_membership.py::test_x[classic]", "tests/test_membership.py"),
    ("tests/test_pairs.py::test_x[artemis]", "tests/test_pairs.py"),
])
def test_a_flavor_s_tests_share_a_worker_and_the_rest_go_by_module(nodeid: str, group: str) -> None:
    """A module with clusters of its own goes by module, whatever its tests' flavor."""
    assert worker_group(nodeid) == group


def test_a_module_with_its_own_clusters_may_not_use_the_session_cluster() -> None:
    from types import SimpleNamespace

    ok = SimpleNamespace(nodeid="tests/test_pairs.py::test_x[classic]", fixturenames=["spark", "pairs"])
    _check_own_cluster(ok)  # type: ignore[arg-type]
    bad = SimpleNamespace(nodeid="tests/test_pairs.py::test_x[classic]", fixturenames=["pairs", "broker", "cluster"])
    with pytest.raises(pytest.UsageError, match=r"test_pairs.py::test_x\[classic\] uses the session cluster "
                                                r"\(broker, cluster\)"):
        _check_own_cluster(bad)  # type: ignore[arg-type]


def test_ports_come_from_the_range_and_are_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "32100-32149")
    first = free_ports(20)
    second = free_ports(20)  # released in between, as a caller's broker has not bound them yet
    assert all(32100 <= p <= 32149 for p in first + second)
    assert len(set(first + second)) == 40, (first, second)


def test_pairs_are_adjacent_and_inside_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "32200-32219")
    pairs = free_port_pairs(5)
    assert all(high == low + 1 and 32200 <= low and high <= 32219 for low, high in pairs), pairs
    assert len({p for pair in pairs for p in pair}) == 10


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "32300-32303")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 32301))
        busy.listen()
        assert 32301 not in free_ports(3)


def test_a_range_with_no_free_port_left_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "32400-32401")
    with pytest.raises(RuntimeError, match=f"{PORT_RANGE_ENV}: no free port left in 32400-32401"):
        free_ports(3)


@pytest.mark.parametrize("raw", ["21000", "a-b", "21010-21000", "0-5", "65000-70000"])
def test_a_bad_range_names_the_variable_and_the_form(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, raw)
    with pytest.raises(ValueError, match=f"{PORT_RANGE_ENV}=.*LOW-HIGH"):
        port_range()


def test_without_a_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    assert port_range() is None and len(set(free_ports(4))) == 4
