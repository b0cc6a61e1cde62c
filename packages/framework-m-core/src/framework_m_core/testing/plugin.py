"""pytest plugin (entry point ``pytest11``): assertion rewriting for the contract suite, so
its failures show the values compared. Loaded by pytest only; it imports nothing else."""

import pytest

pytest.register_assert_rewrite("framework_m_core.testing")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "processes: starts real worker processes and mostly waits on them (the contract "
        "suite's ProcessContract); safe to run side by side with other such tests",
    )
