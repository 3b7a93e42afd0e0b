"""A fast, in-memory SQS (standard queues) shaped like the boto3 ``sqs`` client.

``FastSqs(clock)`` is one account's queues; ``.client(sender_id=...)`` a boto3-shaped
client on them. The parts: :mod:`.errors` (how errors look to boto3),
:mod:`.validation` (limits, attribute checks, the MD5 digests), :mod:`.model`
(a queue: visibility, receipts, redrive) and :mod:`.api` (the operations).

Why: moto's SQS costs ~30 ms per message here, and the bench pushes hundreds of
thousands of reports through the queue in virtual time. This one is a few
microseconds per call, takes its time from an injected :class:`~warmpool.clock.Clock`,
and keeps AWS's semantics; ``tests/integration/test_sqs_semantics.py`` runs the
same suite against it and against moto to show they agree.

Semantics (AWS, checked against the API reference, noted where moto differs):

* Message size: at most 1 MiB (1,048,576 bytes, body plus message attributes);
  the same limit bounds the sum of a batch (``BatchRequestTooLong``).
* Batches take 1..10 entries with distinct ids matching ``[A-Za-z0-9_-]{1,80}``.
* A receipt handle belongs to one receive. ``DeleteMessage`` with the latest
  handle deletes; with a handle of an earlier receive of a message that has been
  received again it answers ``InvalidParameterValue`` ("The receipt handle has
  expired"), which AWS documents as a possible outcome for standard queues
  (moto deletes). Deleting an already-deleted message succeeds (AWS and moto).
  A handle that was never issued is ``ReceiptHandleIsInvalid``.
* ``ChangeMessageVisibility`` on a deleted message or with an expired handle is
  ``InvalidParameterValue`` (moto: ``ReceiptHandleIsInvalid``); the total
  visibility of a message may not pass 12 hours after its first receive.
* Redrive: a message whose ``ApproximateReceiveCount`` has reached the
  source queue's ``maxReceiveCount`` moves to the dead-letter queue on the next
  receive that would have returned it; it keeps its id, body, attributes,
  ``SentTimestamp`` and receive count, and gains ``DeadLetterQueueSourceArn``.
* Long polling (``WaitTimeSeconds``): with a virtual clock the call returns at
  once (time only moves when the driver moves it); with a real clock it blocks
  on a condition variable until a message is available or the wait ends.
* Error codes are those boto3 shows for real SQS (JSON protocol, query
  compatible): ``Error.Code`` is the legacy code (e.g.
  ``AWS.SimpleQueueService.NonExistentQueue``), ``Error.QueryErrorCode`` the
  modeled name, and the raised class is ``client.exceptions.<modeled name>``.

Not modelled: FIFO queues, KMS, tags, permissions, message system attributes
on send (AWSTraceHeader), queue deletion's 60-second name reservation.
"""

from .api import DEFAULT_SENDER_ID, FastSqs, FastSqsClient
from .validation import MAX_MESSAGE_BYTES, md5_of_attributes

__all__ = ["DEFAULT_SENDER_ID", "MAX_MESSAGE_BYTES", "FastSqs", "FastSqsClient", "md5_of_attributes"]
