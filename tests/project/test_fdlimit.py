"""The server raises its open-file limit at start-up, so thousands of streams fit."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator

import pytest

from project.fdlimit import raise_open_file_limit


@pytest.fixture
def low_soft_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 512:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_it_raises_the_soft_limit_to_the_hard_limit_and_says_so(low_soft_limit, caplog):
    caplog.set_level(logging.INFO, logger="project.fdlimit")
    raised = raise_open_file_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == raised > 512
    if hard != resource.RLIM_INFINITY:
        assert soft == hard
    assert "open file limit raised from 512" in caplog.text


def test_a_limit_already_at_the_hard_limit_is_left_and_logged(caplog):
    caplog.set_level(logging.INFO, logger="project.fdlimit")
    raise_open_file_limit()
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_open_file_limit() == before[0]
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == before
    assert "open file limit:" in caplog.text
