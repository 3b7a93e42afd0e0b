"""Fixtures shared by the integration tests.

``env`` (tests/helpers/lambda_env.py) is moto set up as the deployed Lambda
handlers see it; test_esm.py and test_imds.py define an ``env`` of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.agents import free_port
from tests.helpers.ec2_backends import ALL, Backend, open_backend
from tests.helpers.lambda_env import env  # noqa: F401  (the fixture: moto set up as the Lambda handlers see it)


@pytest.fixture(params=ALL)
def any_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The test runs once on each EC2 backend (moto and the emulator's three ways in)."""
    yield from open_backend(request.param)


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    """moto's server on a free local port (SQS, EC2, ... over HTTP), for an agent process."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
