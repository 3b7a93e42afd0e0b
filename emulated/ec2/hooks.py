"""The in-process boto3 way in: a real boto3 ``ec2`` client, served by the emulator.

botocore validates and serializes the call as usual, then emits
``before-call.ec2.<Operation>``; our handler answers it with
``(http_response, parsed)`` from :meth:`Ec2Emulator.dispatch`, so nothing goes
on the network and botocore raises ``ClientError`` for error statuses exactly
as it does for a real answer. The keyword arguments are picked up (after
botocore's own handlers, e.g. the ClientToken generator) at
``before-parameter-build``.

Not exercised on this path: botocore's retry handler (it lives in the HTTP
send, which is skipped), so a throttle surfaces at once instead of after
retries with real sleeps — which is what virtual time needs. The HTTP path
(:mod:`emulated.ec2.http`) runs the full botocore stack, retries included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from .errors import Ec2Error, metadata
from .ports import Dispatcher

if TYPE_CHECKING:
    from .authz import Principal

_PARAMS_KEY = "warmpool_emulated_params"


class _EmptyRaw:
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b""


def _http(status: int, url: str) -> AWSResponse:
    return AWSResponse(url, status, {"content-type": "text/xml;charset=UTF-8"}, _EmptyRaw())


def boto3_client(
    emu: Dispatcher, config: Config | None = None, principal: Principal | None = None, **kwargs: Any
) -> Any:
    """A boto3 ec2 client whose every call is served in-process by ``emu`` (and, with a
    ``principal``, authorized against its policies first: :mod:`emulated.ec2.authz`)."""
    session = boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name=kwargs.pop("region_name", emu.config.region),
    )
    url = kwargs.pop("endpoint_url", "https://ec2.emulated.invalid")
    client = session.client("ec2", endpoint_url=url, config=config, **kwargs)

    def capture(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context[_PARAMS_KEY] = params

    def serve(model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        params = context.pop(_PARAMS_KEY, {})
        action = model.name
        try:
            out = emu.dispatch(action, params, principal)
        except Ec2Error as e:
            return _http(e.status, url), e.response()
        return _http(200, url), out

    # Registered last so the ClientToken generator has already filled params.
    client.meta.events.register_last("before-parameter-build.ec2", capture)
    client.meta.events.register("before-call.ec2", serve)
    return client


__all__ = ["boto3_client", "metadata"]
