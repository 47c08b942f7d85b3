"""Upgrades that never stop the fleet: real workers of two releases while the extension is updated under load.

A client release supports the extension version it was made for and the one before it, so either order of
a rolling deploy works.  Two runs (tests/upgrade/rolling.py), each on a database of its own at the previous
release's extension version, with a producer enqueuing steadily throughout:

- ``previous_first``: two workers of the previous release of pgjobq-py (found in git history and installed
  in a venv of its own: tests/upgrade/releases.py); ``ALTER EXTENSION pgjobq UPDATE`` while they work;
  then each replaced, one at a time, by a worker of this release;
- ``this_first``: two workers of this release; the update while they work; then a job with a task.

Each test asserts one thing over one of the runs (or each of them): nothing lost, nothing run twice or
failed, no worker exiting unasked or other than 0 on SIGTERM, the workers at the update still completing
jobs enqueued after it.  A run's phases and how long each took are printed (pytest -s).
"""

from __future__ import annotations

import pytest
from throwaway_pg import ThrowawayPostgres
from upgrade.releases import PreviousRelease, ReleaseVenv, extension_version_at
from upgrade.rolling import TASK, WARM_UP, WORKERS, Order, UpgradeRun, run_rolling_upgrade

from helpers.fixtures import once_per_run

# the first test of each run also waits for the run (and, once, the previous release's venv to be built)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ORDERS = [
    # each run's tests stay on one pytest-xdist worker (--dist loadgroup), so the run is made once
    pytest.param(order, marks=pytest.mark.xdist_group(f"upgrade-{order}"), id=order)
    for order in ("previous_first", "this_first")
]


def describe(run: UpgradeRun) -> str:
    """The run in a few lines: versions, jobs, who finished how many, how long each phase took."""
    phases = ", ".join(f"{phase} {seconds} s" for phase, seconds in run.timings.items())
    return (
        f"rolling upgrade {run.order}: extension {run.versions[0]} -> {run.versions[1]},"
        f" {run.enqueued} jobs ({run.statuses}), finished by {run.finished_by},"
        f" after the update by {run.after_update_by}; {phases}"
    )


def rolling_upgrade(
    order: Order, request: pytest.FixtureRequest, server: ThrowawayPostgres, folder: pytest.TempPathFactory
) -> UpgradeRun:
    once_per_run(f"upgrade-{order}", f"the rolling upgrade {order}")
    previous: PreviousRelease = request.getfixturevalue("previous")
    # only the previous release's workers need its venv
    venv: ReleaseVenv | None = request.getfixturevalue("previous_venv") if order == "previous_first" else None
    result = run_rolling_upgrade(server, order, previous.extension_version, folder.mktemp(order), venv)
    print(describe(result))
    return result


@pytest.fixture(scope="session")
def previous_first(
    request: pytest.FixtureRequest, pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> UpgradeRun:
    """The run in which the previous release's workers meet the update, then are replaced."""
    return rolling_upgrade("previous_first", request, pg_server, tmp_path_factory)


@pytest.fixture(scope="session")
def this_first(
    request: pytest.FixtureRequest, pg_server: ThrowawayPostgres, tmp_path_factory: pytest.TempPathFactory
) -> UpgradeRun:
    """The run in which this release's workers meet the update."""
    return rolling_upgrade("this_first", request, pg_server, tmp_path_factory)


@pytest.fixture(params=ORDERS)
def run(request: pytest.FixtureRequest, pg_server: ThrowawayPostgres) -> UpgradeRun:
    """Each of the two runs, for the tests that hold for both.

    It names pg_server, which the runs use, so that the server (and its target) comes from the same
    parametrized fixture as in the other tests of this worker, not a second server made for the lookup.
    """
    result: UpgradeRun = request.getfixturevalue(request.param)
    return result


def test_the_update_moves_the_database_from_the_previous_release_to_this_one(
    run: UpgradeRun, previous: PreviousRelease
) -> None:
    assert run.versions == (previous.extension_version, extension_version_at(None))


def test_every_job_enqueued_during_the_upgrade_is_done(run: UpgradeRun) -> None:
    assert run.lost == [], run.log_tails()
    assert run.statuses == {"done": run.enqueued}, run.log_tails()


def test_no_job_runs_twice_or_is_left_half_run(run: UpgradeRun) -> None:
    assert run.run_twice == []
    assert run.not_run_once == []


def test_no_job_fails_or_is_retried(run: UpgradeRun) -> None:
    assert run.retried == [], run.log_tails()


def test_the_producer_enqueues_throughout_the_update_and_every_job_is_one_it_was_given(
    run: UpgradeRun,
) -> None:
    assert run.producer_errors == []
    assert run.unknown == []


def test_the_workers_at_the_update_keep_completing_jobs_enqueued_after_it(run: UpgradeRun) -> None:
    assert len(run.after_update_by) == WORKERS
    assert all(finished >= WARM_UP for finished in run.after_update_by.values()), (
        f"{run.after_update_by}\n{run.log_tails()}"
    )


def test_no_worker_exits_unasked(run: UpgradeRun) -> None:
    assert run.exited_unasked == {}, run.log_tails()


def test_every_worker_exits_0_on_sigterm(run: UpgradeRun) -> None:
    assert run.exit_statuses == dict.fromkeys(run.finished_by, 0), run.log_tails()


@pytest.mark.xdist_group("upgrade-previous_first")
def test_the_workers_of_this_release_that_replace_the_previous_ones_one_at_a_time_work(
    previous_first: UpgradeRun,
) -> None:
    run = previous_first
    assert list(run.finished_by) == ["previous-1", "previous-2", "this-1", "this-2"]
    assert all(run.finished_by[name] >= WARM_UP for name in ("this-1", "this-2")), run.log_tails()


@pytest.mark.xdist_group("upgrade-this_first")
def test_a_worker_that_started_before_the_update_sees_the_task_of_a_job_enqueued_after_it(
    this_first: UpgradeRun,
) -> None:
    run = this_first
    assert run.task_seen == [TASK], run.log_tails()
