"""Fixtures for system tests: real tdrouterd processes and rhea clients.

Every test under tests/system is marked ``system``; tests marked ``rhea``
are skipped when node is missing (failed instead under CI=true).
"""

from __future__ import annotations

import pathlib

import pytest

from tests.system import rhea as rhea_clients
from tests.system.harness import RouterProcess

_HERE = pathlib.Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in pathlib.Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.system)


def pytest_runtest_setup(item):
    if item.get_closest_marker("rhea") is not None:
        rhea_clients.require_rhea()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Remember each phase's report so fixtures can tell whether the test failed.
    rep = yield
    setattr(item, f"_rep_{rep.when}", rep)
    return rep


def _stderr_tail(router: RouterProcess, lines: int = 200) -> str:
    text = router.stderr_text().splitlines()
    cut = "" if len(text) <= lines else f"[... {len(text) - lines} earlier lines ...]\n"
    return cut + "\n".join(text[-lines:])


@pytest.fixture
def router_factory(tmp_path, request):
    """``make(sections="", **kw)`` -> a started RouterProcess (see harness).

    At teardown every router is stopped with SIGTERM and must exit with its
    ``expected_exit_code`` (0 by default), so a crash fails the test.  Routers
    the test killed on purpose (``router.kill()``) are not checked.
    """
    routers: list[RouterProcess] = []

    def make(sections: str = "", **kw) -> RouterProcess:
        r = RouterProcess(tmp_path, sections, **kw)
        routers.append(r)
        return r.start()

    yield make

    rhea_clients.kill_leftovers()
    problems = []
    for r in routers:
        if r.proc is None or r.killed or r.start_failed:
            continue  # never ran, crashed on purpose, or start() already raised
        try:
            code = r.stop()
        except Exception as e:  # noqa: BLE001 - report every router
            problems.append(f"{r.router_id}: {e}")
            continue
        if r.expected_exit_code is not None and code != r.expected_exit_code:
            problems.append(
                f"{r.router_id} exited with status {code} "
                f"(expected {r.expected_exit_code})\n"
                f"--- {r.stderr_path} ---\n{_stderr_tail(r)}"
            )
    call_rep = getattr(request.node, "_rep_call", None)
    if call_rep is not None and call_rep.failed and not problems:
        # Show the routers' logs next to the test failure.
        for r in routers:
            if r.proc is not None:
                print(f"--- {r.router_id} stderr ({r.stderr_path}) ---\n{_stderr_tail(r)}")
    if problems:
        pytest.fail("router teardown failed:\n" + "\n\n".join(problems), pytrace=False)


@pytest.fixture
def router(router_factory) -> RouterProcess:
    """A started standalone router with just the default 'amqp' listener."""
    return router_factory()
