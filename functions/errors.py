"""AWS errors, classified once.

Every ``ClientError`` the functions see goes through :func:`classify`, which
turns the AWS error *code* (never the message text) into one of warmpool's
domain errors. The rest of ``functions/`` catches these, not ``ClientError``.
"""

from __future__ import annotations

from botocore.exceptions import ClientError


class AwsError(Exception):
    """An AWS call failed; ``code`` is AWS's error code, ``action`` the API."""

    def __init__(self, code: str, message: str = "", action: str = "") -> None:
        super().__init__(f"{action}: {code}: {message}" if action else f"{code}: {message}")
        self.code = code
        self.message = message
        self.action = action


class Throttled(AwsError):
    """The account's token bucket for the action is empty (RequestLimitExceeded)."""


class SubnetFull(AwsError):
    """InsufficientFreeAddressesInSubnet: try another subnet."""


class NoCidrBlocks(AwsError):
    """InsufficientCidrBlocks: no free /28 for a prefix; fall back to addresses."""


class AddressLimit(AwsError):
    """PrivateIpAddressLimitExceeded: our view of the ENI was stale."""


class AttachmentLimit(AwsError):
    """The instance has no room (or the device index is taken)."""


class NotFound(AwsError):
    """The instance, ENI, attachment or queue no longer exists."""


class InUse(AwsError):
    """The ENI is still attached/detaching; it cannot be deleted yet."""


class NotAssigned(AwsError):
    """InvalidParameterValue answering UnassignPrivateIpAddresses: an address it names is not
    on the ENI ("not assigned to interface"). This request took nothing, yet the address is
    not the ENI's: an earlier request took it (one whose answer was lost, sent again), or
    someone else did. Never a sign the address is still the node's."""


class AddressTaken(AwsError):
    """InvalidIPAddress.InUse answering AssignPrivateIpAddresses or CreateNetworkInterface: an address it names is held
    elsewhere (named placement read a subnet view another caller has since changed)."""


class TokenMismatch(AwsError):
    """IdempotentParameterMismatch: the ClientToken was used with other parameters."""


class ConditionFailed(AwsError):
    """A DynamoDB conditional write lost (someone else wrote first)."""


class QueueMissing(NotFound):
    """An SQS queue does not exist (a node's result queue not created yet)."""


_CODES: dict[str, type[AwsError]] = {
    "RequestLimitExceeded": Throttled,
    "Throttling": Throttled,
    "ThrottlingException": Throttled,
    "InsufficientFreeAddressesInSubnet": SubnetFull,
    "InsufficientCidrBlocks": NoCidrBlocks,
    "PrivateIpAddressLimitExceeded": AddressLimit,
    "AttachmentLimitExceeded": AttachmentLimit,
    "InvalidNetworkInterfaceID.NotFound": NotFound,
    "InvalidNetworkInterface.NotFound": NotFound,
    "InvalidInstanceID.NotFound": NotFound,
    "InvalidAttachmentID.NotFound": NotFound,
    "InvalidSubnetID.NotFound": NotFound,
    "IncorrectInstanceState": InUse,
    "InvalidNetworkInterface.InUse": InUse,
    "IdempotentParameterMismatch": TokenMismatch,
    "ConditionalCheckFailedException": ConditionFailed,
    "TransactionCanceledException": ConditionFailed,
    "TransactionConflictException": ConditionFailed,
    "AWS.SimpleQueueService.NonExistentQueue": QueueMissing,
    "QueueDoesNotExist": QueueMissing,
}


_ACTION_CODES: dict[tuple[str, str], type[AwsError]] = {
    ("UnassignPrivateIpAddresses", "InvalidParameterValue"): NotAssigned,
    ("AssignPrivateIpAddresses", "InvalidIPAddress.InUse"): AddressTaken,
    ("CreateNetworkInterface", "InvalidIPAddress.InUse"): AddressTaken,
}
"""Codes whose meaning depends on the action (InvalidParameterValue is generic elsewhere)."""


def classify(exc: ClientError, action: str = "") -> AwsError:
    """The domain error for an AWS ``ClientError`` (by code, and for some codes the action)."""
    err = exc.response.get("Error", {})
    code = str(err.get("Code", "Unknown"))
    message = str(err.get("Message", ""))[:300]
    action = action or exc.operation_name
    cls = _ACTION_CODES.get((action, code)) or _CODES.get(code, AwsError)
    return cls(code, message, action)


AMBIGUOUS_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable", "Unknown"})
"""Server-side failures: the call may or may not have taken effect (issue 21, ambiguous outcomes)."""


def rejected(err: AwsError) -> bool:
    """AWS answered that it refused the call (throttled, or a client error): it took no effect.
    A server error (:data:`AMBIGUOUS_CODES`), or no answer at all, says nothing."""
    return err.code not in AMBIGUOUS_CODES


def is_mutating(action: str) -> bool:
    return not action.startswith(("Describe", "Get", "List"))
