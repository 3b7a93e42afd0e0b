"""SQS errors: raised inside the emulator as :class:`SqsError`, shown as boto3 shows them.

boto3 talks to SQS in the JSON protocol with query compatibility: ``Error.Code``
carries the legacy (query) code, e.g. ``AWS.SimpleQueueService.NonExistentQueue``,
``Error.QueryErrorCode`` the modeled name, and the exception raised is
``client.exceptions.<modeled name>``, a ``ClientError`` subclass.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

LEGACY_CODES: dict[str, str] = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueNameExists": "QueueAlreadyExists",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "PurgeQueueInProgress": "AWS.SimpleQueueService.PurgeQueueInProgress",
    "ReceiptHandleIsInvalid": "ReceiptHandleIsInvalid",
    "InvalidAttributeName": "InvalidAttributeName",
    "InvalidAttributeValue": "InvalidAttributeValue",
    "InvalidParameterValue": "InvalidParameterValue",
    "MissingParameter": "MissingParameter",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
}
"""Modeled exception name -> the legacy (query) error code boto3 puts in ``Error.Code``."""


class SqsError(Exception):
    """An SQS error response: the modeled name and AWS's message. The API turns
    it into the ``ClientError`` subclass boto3 raises, naming the operation."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def missing(parameter: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {parameter}.")


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


class ClientExceptions:
    """``client.exceptions`` for the fast client: one ClientError subclass per
    modeled error, so ``except sqs.exceptions.QueueDoesNotExist`` works."""

    def __init__(self) -> None:
        self._classes: dict[str, type[ClientError]] = {name: type(name, (ClientError,), {}) for name in LEGACY_CODES}
        self.ClientError = ClientError

    def __getattr__(self, name: str) -> type[ClientError]:
        try:
            return self._classes[name]
        except KeyError:
            raise AttributeError(name) from None

    def make(self, name: str, message: str, operation: str) -> ClientError:
        cls = self._classes.get(name, ClientError)
        return cls(
            {
                "Error": {
                    "Code": LEGACY_CODES.get(name, name),
                    "QueryErrorCode": name,
                    "Message": message,
                    "Type": "Sender",
                },
                "ResponseMetadata": {"HTTPStatusCode": 400, "RetryAttempts": 0},
            },
            operation,
        )

    def of(self, error: SqsError, operation: str) -> ClientError:
        return self.make(error.name, error.message, operation)
