"""pytest plugin (entry point ``pytest11``): assertion rewriting for the contract suite, so
its failures show the values compared. Loaded by pytest only; it imports nothing else."""

import pytest

pytest.register_assert_rewrite("framework_m_core.testing")
