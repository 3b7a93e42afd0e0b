"""Ports: the small interfaces through which logic reaches I/O.

Each lists only the calls warmpool uses. The logic reaches EC2 through
:class:`Ec2Port`, typed in the core's own terms (the planner's calls, ENI and
node facts), as Cilium's operator reaches it through a small typed interface
(``pkg/aws/eni/node_manager.go``, ``ec2API``): a misspelt parameter is a type
error, not a run-time one. Its implementation, ``functions/ec2.py``, adapts a
client shaped like boto3's low-level one (:class:`Ec2Api`: same method names,
keyword arguments and response dicts; errors raised as
``botocore.exceptions.ClientError``), so production passes a real boto3 client
and the bench a fast stand-in from ``sim/``. SQS is used through the boto3
shape directly. The store ports are warmpool's own, with a DynamoDB
implementation in ``functions/`` and an in-memory one in ``sim/`` that share
one semantic test suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from warmpool.buckets import BucketState
from warmpool.calls import AssignAddresses, CreateEni, UnassignAddresses
from warmpool.clock import Clock
from warmpool.facts import EniFacts, NodeFacts
from warmpool.limits import InstanceLimits
from warmpool.messages import Assigned
from warmpool.placement import Usage
from warmpool.release_book import ReleaseBook
from warmpool.subnets import Subnet


class Ec2Port(Protocol):
    """EC2 as the allocator and the reconciler use it, typed.

    Every call is counted per action; failures raise the kinds of
    ``functions.errors.AwsError`` (``Throttled``, ``NotFound``, ...). Reads are
    filtered and paginated, one round for all the nodes asked about."""

    # --- reads ---
    def describe_nodes(self, instance_ids: Iterable[str]) -> dict[str, NodeFacts]:
        """Instances and their attached ENIs; an instance EC2 does not show is absent."""
        ...

    def describe_instances(self, instance_ids: Iterable[str]) -> dict[str, NodeFacts]:
        """Instances without their ENIs (state, type, tags); an instance EC2 does not show is absent."""
        ...

    def describe_cluster_instances(self, cluster: str) -> dict[str, NodeFacts]:
        """Every instance tagged for the cluster (``owned`` or ``shared``), without their ENIs."""
        ...

    def describe_attached(self, instance_ids: Sequence[str]) -> dict[str, list[EniFacts]]: ...
    def describe_enis(self, eni_ids: Iterable[str]) -> dict[str, EniFacts]: ...

    def describe_cluster_enis(self, cluster: str) -> list[EniFacts]:
        """Every ENI tagged for the cluster."""
        ...

    def subnets(self, vpc_ids: Iterable[str] = ()) -> dict[str, Subnet]:
        """The subnets warmpool may use (cached by the implementation)."""
        ...

    def known_subnets(self) -> dict[str, Subnet]:
        """The subnets read last (however old; empty when none was read yet): never a read."""
        ...

    def spend_subnet(self, subnet_id: str, addresses: int) -> None: ...
    def forget_subnets(self) -> None: ...

    def subnet_usage(self, subnet_id: str, held: Callable[[], frozenset[str] | None] | None = None) -> Usage | None:
        """What the subnet's ENIs hold (``DescribeNetworkInterfaces`` by ``subnet-id``) and its CIDR
        reservations (``GetSubnetCidrReservations``), each page paid from the account's bucket, and
        ``held`` (asked after the Describe: what the release books unassigned within the hold),
        cached; None when unknown: not a subnet read, or unpaid (or ``held`` None) and never read."""
        ...

    def note_placed(self, subnet_id: str, ips: Sequence[str], prefixes: Sequence[str]) -> None:
        """Add what a call just took to the cached usage (the next placement avoids it)."""
        ...

    def forget_usage(self, subnet_id: str) -> None:
        """Drop the cached usage (a named address or prefix was found taken)."""
        ...

    def limits(self, instance_type: str) -> InstanceLimits: ...

    # --- writes ---
    def assign(self, call: AssignAddresses) -> Assigned:
        """AssignPrivateIpAddresses: the prefixes ``call.at_prefixes`` names, else ``call.prefixes``
        /28s by count; with no prefix, the addresses ``call.at_ips`` names, else ``call.ips`` by count."""
        ...

    def unassign(self, call: UnassignAddresses) -> None: ...

    def create_eni(
        self, call: CreateEni, *, description: str, groups: Sequence[str], tags: Mapping[str, str]
    ) -> EniFacts:
        """CreateNetworkInterface in ``call.subnet_id`` with ``call``'s addresses
        and ClientToken; the new ENI (attached only if the token found an earlier one)."""
        ...

    def attach(self, *, instance_id: str, eni_id: str, device_index: int, network_card: int) -> str:
        """AttachNetworkInterface; the attachment id."""
        ...

    def detach(self, attachment_id: str) -> None: ...
    def delete_eni(self, eni_id: str) -> None: ...

    def set_delete_on_termination(self, eni_id: str, attachment_id: str) -> None:
        """ModifyNetworkInterfaceAttribute: the ENI goes with its instance."""
        ...

    def create_tags(self, resources: Sequence[str], tags: Mapping[str, str]) -> None: ...


class Ec2Api(Protocol):
    """The boto3-shaped EC2 client the adapter of :class:`Ec2Port` wraps (boto3 ``ec2`` subset)."""

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]: ...
    def describe_network_interfaces(self, **kwargs: Any) -> dict[str, Any]: ...
    def describe_subnets(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_subnet_cidr_reservations(self, **kwargs: Any) -> dict[str, Any]: ...
    def describe_instance_types(self, **kwargs: Any) -> dict[str, Any]: ...
    def create_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...
    def attach_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...
    def modify_network_interface_attribute(self, **kwargs: Any) -> dict[str, Any]: ...
    def assign_private_ip_addresses(self, **kwargs: Any) -> dict[str, Any]: ...
    def unassign_private_ip_addresses(self, **kwargs: Any) -> dict[str, Any]: ...
    def detach_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...
    def create_tags(self, **kwargs: Any) -> dict[str, Any]: ...


class SqsApi(Protocol):
    """The SQS calls warmpool makes (boto3 ``sqs`` client subset)."""

    def create_queue(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_queue_url(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_queue(self, **kwargs: Any) -> dict[str, Any]: ...
    def send_message(self, **kwargs: Any) -> dict[str, Any]: ...
    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]: ...
    def receive_message(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_message(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_message_batch(self, **kwargs: Any) -> dict[str, Any]: ...
    def change_message_visibility(self, **kwargs: Any) -> dict[str, Any]: ...
    def get_queue_attributes(self, **kwargs: Any) -> dict[str, Any]: ...
    def list_queues(self, **kwargs: Any) -> dict[str, Any]: ...


class BucketStore(Protocol):
    """Shared token buckets, one per EC2 action, scoped to account and region.

    Implementations update atomically (conditional writes): under any
    concurrency no token is lost or spent twice.
    """

    def load(self, action: str, now: float) -> BucketState: ...

    def try_take(self, action: str, n: float, now: float) -> tuple[bool, float]:
        """Take ``n`` tokens now if there; else take nothing. Returns
        ``(taken, seconds_until_n_available)``."""
        ...

    def throttled(self, action: str, now: float) -> None:
        """EC2 answered ``RequestLimitExceeded``: apply the AIMD cut."""
        ...

    def take_batch(self, requests: Sequence[Mapping[str, float]], now: float) -> list[float]:
        """Pay for a whole batch's nodes with one read and one conditional
        write. Grants, in order and all-or-nothing each, the requests the
        buckets can pay for now; one wait per request: 0.0 = granted, else
        seconds until its tokens will exist (queued behind earlier refused
        ones), ``inf`` if never."""
        ...


class LedgerUnread(Exception):
    """Some nodes' ledger rows could not be read (DynamoDB left them in
    ``UnprocessedKeys`` after bounded retries). Their seq is unknown, never -1:
    reports of ``unread`` nodes must wait. ``seqs`` holds the nodes read (-1 =
    no row)."""

    def __init__(self, unread: frozenset[str], seqs: dict[str, int]) -> None:
        super().__init__(f"ledger rows not read: {', '.join(sorted(unread))}")
        self.unread = unread
        self.seqs = seqs


class Ledger(Protocol):
    """Per-node record of what the allocator did (conditional writes).

    Keyed by instance id since issue 12 (the ``node`` parameters below receive
    the instance id; the report's node name is only a label in the outcome)."""

    def last_seq(self, cluster: str, node: str) -> int:
        """The highest report seq served for the node (-1 if none)."""
        ...

    def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
        """Each node's last seq (-1 if it has no row); raises
        :class:`LedgerUnread` if some rows could not be read."""
        ...

    def record(self, cluster: str, node: str, seq: int, outcome: dict[str, Any], now: float) -> bool:
        """Store ``seq`` as served if it is newer than what is stored; False if not."""
        ...

    def forget(self, cluster: str, node: str, *, instance_id: str, last_seq: int) -> bool:
        """Delete the node's entry only if it is still the one the caller
        decided on (same instance id and last seq): a node name reused by a
        new instance keeps the new instance's entry. False if it changed or is gone."""
        ...

    def nodes(self, cluster: str) -> dict[str, int]:
        """Every node with an entry, and its last seq."""
        ...

    def entries(self, cluster: str) -> dict[str, dict[str, Any]]:
        """``{node: {last_seq, outcome, instance_id, updated_at}}`` (reconcile
        needs the instance to find terminated nodes)."""
        ...


class LeaseStore(Protocol):
    """Short leases so two invocations never act on one node at once (keyed by instance id)."""

    def claim(self, cluster: str, node: str, owner: str, now: float, ttl_s: float) -> bool: ...
    def release(self, cluster: str, node: str, owner: str) -> None: ...

    def sweep(self, cluster: str, now: float) -> int:
        """Delete expired leases; how many."""
        ...


@dataclass(frozen=True)
class FlipState:
    """One instance's flip history (``functions/fairness.py``): the kind of its last
    report that asked for something, when it flipped, and until when it is damped."""

    last_kind: str = ""
    flips: tuple[float, ...] = ()
    damped_until: float = 0.0


class FlipStore(Protocol):
    """Flip histories shared by every allocator container (issue 12): an instance whose
    reports land on different containers is still seen flipping, and a cold start
    forgets no damping. Last writer wins: batches of one instance running at the same
    time may count its flips once per pair (bounded by the mapping's concurrency)."""

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, FlipState]:
        """The stored states of those instances that have one; raises when any row could not
        be read (the caller must neither trust nor overwrite those rows then)."""
        ...

    def save(self, cluster: str, instance_id: str, state: FlipState, expires_at: float) -> None:
        """Store the state (last writer wins); it may be dropped after ``expires_at``."""
        ...


@runtime_checkable
class PlacementRecords(Protocol):
    """What named placement shares between containers (``functions/execute.py``), kept beside
    the release books: the addresses released recently per subnet, and the parameters each
    CreateNetworkInterface was sent with, by ClientToken. Reads are strongly consistent;
    every method raises when the store cannot answer (the caller must not take silence as
    "nothing")."""

    def hold(self, cluster: str, subnet_id: str, keys: Sequence[str], at: float, expires_at: float) -> None:
        """Record that ``keys`` (addresses, /28 prefixes) of ``subnet_id`` are released at ``at``
        (the latest time wins), before the call that releases them."""
        ...

    def held(self, cluster: str, subnet_id: str, since: float) -> frozenset[str]:
        """The keys of ``subnet_id`` recorded released at ``since`` or later."""
        ...

    def put_create(self, cluster: str, call: CreateEni, expires_at: float) -> None:
        """Record the Create about to be sent under ``call.client_token`` (names or counts)."""
        ...

    def get_create(self, cluster: str, client_token: str) -> CreateEni | None:
        """The Create last recorded under ``client_token``, if any."""
        ...


class ReleaseBookStore(Protocol):
    """The allocator's release books (``warmpool/release_book.py``), one per instance, shared by
    every container. Reads are strongly consistent; a save is conditional on the version the
    caller read, so two invocations never both build on one version."""

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, ReleaseBook]:
        """Every asked instance's book (version 0 and empty where none is stored); raises when
        any could not be read or parsed (the caller must not then take it as empty)."""
        ...

    def save(self, cluster: str, instance_id: str, book: ReleaseBook, expires_at: float) -> ReleaseBook | None:
        """Store ``book`` if the stored version is still ``book.version``; the book as stored
        (its version one higher), or None if another writer came first."""
        ...


@dataclass(frozen=True)
class Ports:
    """Everything the allocator and the reconciler do I/O through: the one
    wiring. Production builds it from boto3 clients and the DynamoDB stores
    (``functions.aws.ports``); the bench, the simulation and the tests from the
    emulators and the memory stores (``emulated.harness``). The configuration
    travels beside it, as ``functions.settings.Settings``."""

    ec2: Ec2Api
    sqs: SqsApi
    buckets: BucketStore
    ledger: Ledger
    leases: LeaseStore
    clock: Clock
    flips: FlipStore | None = None
    """The allocator's shared flip histories (the reconciler uses none; None: per container)."""
    release_books: ReleaseBookStore | None = None
    """The allocator's release books (the reconciler uses none; None: this container's own)."""
