"""EC2 errors as AWS sends them: a code, a message and an HTTP status.

The model raises :class:`Ec2Error`; each way in turns it into what its caller
expects (``botocore.exceptions.ClientError`` in-process, an XML error document
over HTTP) from the same three fields.
"""

from __future__ import annotations

import uuid
from typing import Any

from botocore.exceptions import ClientError

STATUS_BY_CODE: dict[str, int] = {
    "RequestLimitExceeded": 503,
    "Unavailable": 503,
    "ServiceUnavailable": 503,
    "InternalError": 500,
    "InternalFailure": 500,
    "DryRunOperation": 412,
    "UnauthorizedOperation": 403,
    "AuthFailure": 401,
}
"""Codes whose HTTP status is not 400 (every other EC2 client error is 400)."""


def status_for(code: str) -> int:
    return STATUS_BY_CODE.get(code, 400)


class Ec2Error(Exception):
    """An EC2 error response."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status if status is not None else status_for(code)

    def response(self, request_id: str | None = None) -> dict[str, Any]:
        """The dict botocore's parser would produce for this error."""
        return {
            "Error": {"Code": self.code, "Message": self.message},
            "ResponseMetadata": metadata(self.status, request_id),
        }

    def client_error(self, operation: str, request_id: str | None = None) -> ClientError:
        return ClientError(self.response(request_id), operation)


def new_request_id() -> str:
    return str(uuid.uuid4())


def metadata(status: int = 200, request_id: str | None = None) -> dict[str, Any]:
    rid = request_id or new_request_id()
    return {
        "RequestId": rid,
        "HTTPStatusCode": status,
        "HTTPHeaders": {"x-amzn-requestid": rid, "content-type": "text/xml;charset=UTF-8"},
        "RetryAttempts": 0,
    }


def not_found(kind: str, ident: str) -> Ec2Error:
    """``Invalid<Kind>ID.NotFound`` with AWS's message."""
    names = {
        "NetworkInterface": "network interface",
        "Instance": "instance ID",
        "Subnet": "subnet ID",
        "Vpc": "vpc ID",
        "Attachment": "attachment ID",
    }
    return Ec2Error(f"Invalid{kind}ID.NotFound", f"The {names.get(kind, kind)} '{ident}' does not exist")
