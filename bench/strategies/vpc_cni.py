"""``vpc-cni``: a model of the AWS VPC CNI's per-node ipamd
(aws/amazon-vpc-cni-k8s v1.2x). docs/bench.md cites the source function of
each behaviour.

* One ipamd per node, started when the node joins. Init reads the instance
  with one ``DescribeInstances`` (filtered by instance id); if the SDK gives
  up (throttled), the container restarts and tries again 10 s later. What
  the instance's ENIs already hold (a launch template's addresses or prefixes on
  the primary ENI, the scenario's ``launch_pool``) goes into the pool as ipamd's
  ``nodeInit`` → ``setupENI`` does (``addENIsecondaryIPsToDataStore``,
  ``addENIv4prefixesToDataStore`` in ``pkg/ipamd/ipamd.go``): no EC2 call to assign.
* The pool loop runs every 5 s, counted from the end of the previous action
  (``sleep(5s); updateIPPoolIfRequired()``), and takes **one action per
  loop**: grow, or shrink, or nothing.
* The decision is :func:`warmpool.pool.compute` with ``pending=0`` — the same
  target arithmetic as ipamd; pods whose CNI ADD failed are *not* demand.
* Grow (``tryAssignIPs``, ``tryAssignPrefixes``): ``AssignPrivateIpAddresses`` on the first
  ENI with free slots, asking ``min(short, free slots)`` (a whole ENI's worth in
  WARM_ENI mode); if that call fails (after the SDK's retries), one more call
  at once for a single address or prefix (``AllocIPAddresses(eni, 1)``); if that fails
  for want of room in the subnet and subnet discovery is on, the next ENI is tried, and
  after the last a new ENI. If no ENI has room and ``MAX_ENI``/the type allows
  (``tryAllocateENI`` → ``AllocENI``): ``DescribeSubnets`` (subnet discovery),
  ``CreateNetworkInterface`` with the addresses in the call,
  ``DescribeInstances`` for a free device index, ``AttachNetworkInterface``,
  ``ModifyNetworkInterfaceAttribute`` (DeleteOnTermination), then
  ``WaitForENIAndIPsAttached``: up to 12 IMDS reads, 0.1 s apart doubling
  (capped at 60 s) with up to 15 % added jitter. A failed attach deletes the
  new ENI.
* Shrink: IP-target modes unassign up to ``over`` free addresses (whole free
  prefixes in prefix mode) from the ENI with the most of them; WARM_ENI mode
  frees one whole surplus ENI (not the primary, no pods or cooling addresses,
  older than 60 s): detach, wait until detached, delete. Shrinking happens at
  most every 30 s (ipamd's ``decreaseIPPoolInterval``).
* Every call goes through aws-sdk-go-v2's standard retryer as vpc-cni builds
  its client (``awssession.New``: ``RetryMaxAttempts`` 10): backoff
  ``U[0,1)·2^i`` s capped at 20 s and the client's retry quota (500 tokens, 5
  a retry) — see :class:`bench.proc.StandardRetryer`. A call that still
  fails ends the loop's action (logged), and the next loop tries again.
* A grow that failed for want of room in the subnet (``InsufficientCidrBlocks``,
  ``InsufficientFreeAddressesInSubnet``) stops growing for 120 s
  (``insufficientCidrErrorCooldown``, ``inInsufficientCidrCoolingPeriod``).
* A freed address cools down ``IP_COOLDOWN_PERIOD`` before reuse.
* A CNI ADD that finds no address fails at once; the kubelet syncs the pod
  again 10–15 s later (:meth:`bench.world.BenchWorld.kubelet_retry_s`), so a
  pod is not served the instant an address appears.
* A new ENI's subnet (``createENI`` in ``pkg/awsutils/awsutils.go``): with custom networking
  (the scenario's ``cluster.custom_network``, one ``ENIConfig`` per zone) the zone's subnet
  and security groups, no ``DescribeSubnets`` (a zone without one: no ENI, as
  ``tryAllocateENI`` in ``pkg/ipamd/ipamd.go`` when ``MyENIConfig`` fails); else with
  ``ENABLE_SUBNET_DISCOVERY`` (on by default) the zone's subnets from ``getVpcSubnets``,
  most ``AvailableIpAddressCount`` first, each tried in turn until a
  ``CreateNetworkInterface`` succeeds: the node's own, and others only when they carry the
  ``kubernetes.io/role/cni`` tag key (``validTag``: its value is not read); a failed
  ``DescribeSubnets`` falls back to the node's own subnet. Without discovery, the node's own.
* With custom networking the primary ENI takes no pod (``GetAllocatableENIs`` in
  ``pkg/ipamd/datastore/data_store.go`` leaves it out), and the pool's ceiling counts one ENI
  fewer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import ClientError

from bench.proc import Proc, StandardRetryer, ec2_call, error_code, spawn, wait_until
from bench.world import BenchWorld, NodePool, NodeRt
from warmpool.names import TAG_CLUSTER_NAME, TAG_CREATED_AT, TAG_INSTANCE_ID, TAG_SUBNET_ROLE
from warmpool.pool import PoolState, compute

LOOP_S = 5.0
DECREASE_INTERVAL_S = 30.0
ENI_MIN_AGE_S = 60.0
RESTART_S = 10.0
POLL_S = 1.0
ATTACH_WAIT_S = 60.0
SDK_MAX_ATTEMPTS = 10
"""``awssession.New``: ``config.WithRetryMaxAttempts(maxRetries)`` with ``maxRetries = 10``."""
IMDS_WAIT_FIRST_S = 0.1
IMDS_WAIT_MAX_S = 60.0
IMDS_WAIT_JITTER = 0.15
IMDS_WAIT_TRIES = 12
"""``waitForENIAndIPsAttached``: ``NewSimpleBackoff(100 ms, maxENIBackoffDelay = 1 min, 0.15, 2.0)``,
``maxENIEC2APIRetries = 12`` reads of IMDS."""
LIMIT_EXCEEDED = "PrivateIpAddressLimitExceeded"
INSUFFICIENT_COOLDOWN_S = 120.0
"""``insufficientCidrErrorCooldown`` (``pkg/ipamd/ipamd.go``): after a grow failed for want of room
in the subnet, ``increaseDatastorePool`` tries again only this much later."""
NO_ROOM = ("InsufficientCidrBlocks", "InsufficientFreeAddressesInSubnet")
"""``containsInsufficientCIDRsOrSubnetIPs``: the subnet has no room for the call."""


@dataclass
class _Eni:
    eni_id: str
    device_index: int
    created_at: float
    primary: bool


class Ipamd:
    """One node's ipamd (see the module docstring)."""

    def __init__(self, world: BenchWorld, node: NodeRt, owner: VpcCni) -> None:
        self.w = world
        self.node = node
        self.owner = owner
        env = node.spec.env
        self.discovery = env.ENABLE_SUBNET_DISCOVERY
        self.custom = world.scenario.cluster_named(node.spec.cluster).custom_network
        self.cfg = replace(env.pool_config(), custom_networking=bool(self.custom))
        self.pool = NodePool(env.IP_COOLDOWN_PERIOD)
        self.enis: dict[str, _Eni] = {}
        self.last_decrease = -1e18
        self.insufficient_at = -1e18
        self.busy = False
        self.retryer = StandardRetryer(SDK_MAX_ATTEMPTS)

    # --- CNI
    def cni_add(self, pod: str) -> None:
        self.pool.pending.append(pod)
        self.try_add(pod)

    def cni_del(self, pod: str) -> None:
        self.pool.release(pod, self.w.now())

    def try_add(self, pod: str) -> None:
        """One CNI ADD: an address now, or a failure the kubelet retries 10–15 s later."""
        if pod not in self.pool.pending:
            return  # deleted while waiting
        ip = self.pool.assign(pod, self.w.now())
        if ip is None:
            self.owner.counts["cni_add_failed"] += 1
            self.w.loop.call_later(self.w.kubelet_retry_s(), lambda: self.try_add(pod))
            return
        self.pool.pending.remove(pod)
        self.w.pod_ready(self.node, pod, ip)

    # --- EC2
    def call(self, method: str, action: str, **kwargs: Any) -> Proc[dict[str, Any]]:
        return ec2_call(self.w.ec2, method, kwargs, latency=self.w.latency(action), retry=self.retryer, rng=self.w.rng)

    def main(self) -> Proc[None]:
        while True:
            try:
                out = yield from self.call(
                    "describe_instances", "DescribeInstances", InstanceIds=[self.node.instance_id]
                )
                break
            except ClientError:
                self.owner.counts["init_failed"] += 1
                yield RESTART_S
        inst = out["Reservations"][0]["Instances"][0]
        for ni in inst["NetworkInterfaces"]:
            eni_id = ni["NetworkInterfaceId"]
            idx = ni["Attachment"]["DeviceIndex"]
            self.enis[eni_id] = _Eni(eni_id, idx, self.w.now(), primary=idx == 0)
            if idx == 0 and self.custom:
                continue  # custom networking: the primary ENI serves no pod
            self.pool.add(
                eni_id,
                [a["PrivateIpAddress"] for a in ni.get("PrivateIpAddresses", []) if not a.get("Primary")],
                [p["Ipv4Prefix"] for p in ni.get("Ipv4Prefixes", [])],
            )
        while True:
            self.busy = True
            try:
                yield from self.step()
            except ClientError as exc:
                self.owner.counts[f"error:{error_code(exc)}"] += 1
            self.busy = False
            yield LOOP_S

    def state(self) -> PoolState:
        return PoolState(
            total=self.pool.total,
            assigned=self.pool.assigned,
            pending=0,
            enis=len(self.enis),
            free_prefixes=self.pool.free_prefixes() if self.cfg.prefix_mode else 0,
        )

    def step(self) -> Proc[None]:
        delta = compute(self.cfg, self.state(), self.node.limits)
        now = self.w.now()
        if delta.low:
            if now - self.insufficient_at < INSUFFICIENT_COOLDOWN_S:
                return  # inInsufficientCidrCoolingPeriod
            try:
                yield from self.increase(delta.short_units, whole=delta.whole_enis)
            except ClientError as exc:
                if error_code(exc) in NO_ROOM:
                    self.insufficient_at = self.w.now()  # lastInsufficientCidrError
                raise
        elif delta.high and now - self.last_decrease >= DECREASE_INTERVAL_S:
            self.last_decrease = now
            if delta.over_enis > 0:
                yield from self.free_eni()
            elif delta.over_units > 0:
                yield from self.release(delta.over_units)

    def _used_slots(self, eni_id: str) -> int:
        return (
            len(self.pool.eni_addrs.get(eni_id, []))
            - 16 * len(self.pool.eni_prefixes.get(eni_id, []))
            + len(self.pool.eni_prefixes.get(eni_id, []))
        )

    def increase(self, short_units: int, *, whole: bool) -> Proc[None]:
        slots = self.node.limits.slots_per_eni
        count_key = "Ipv4PrefixCount" if self.cfg.prefix_mode else "SecondaryPrivateIpAddressCount"
        for e in sorted(self.enis.values(), key=lambda e: e.device_index):
            if e.primary and self.custom:
                continue
            free = slots - self._used_slots(e.eni_id)
            if free > 0:
                n = free if whole else min(short_units, free)
                try:
                    out = yield from self.call(
                        "assign_private_ip_addresses",
                        "AssignPrivateIpAddresses",
                        NetworkInterfaceId=e.eni_id,
                        **{count_key: n},
                    )
                except ClientError as exc:
                    if error_code(exc) == LIMIT_EXCEEDED:
                        raise
                    # tryAssignIPs / tryAssignPrefixes: the assign failed; try just one more
                    # address (prefix) at once, and with subnet discovery, when the subnet is out
                    # of room, go on to the next ENI (then a new ENI, maybe in another subnet)
                    self.owner.counts["assign_one_fallback"] += 1
                    try:
                        out = yield from self.call(
                            "assign_private_ip_addresses",
                            "AssignPrivateIpAddresses",
                            NetworkInterfaceId=e.eni_id,
                            **{count_key: 1},
                        )
                    except ClientError as again:
                        if self.discovery and error_code(again) in NO_ROOM:
                            continue
                        raise
                self.pool.add(
                    e.eni_id,
                    [a["PrivateIpAddress"] for a in out.get("AssignedPrivateIpAddresses", [])],
                    [p["Ipv4Prefix"] for p in out.get("AssignedIpv4Prefixes", [])],
                )
                return
        if len(self.enis) >= self.node.limits.enis(self.cfg.max_eni):
            return
        n = slots if whole else min(short_units, slots)
        now = self.w.now()
        created = yield from self.create_eni(n, count_key)
        if created is None:
            return
        ni = created["NetworkInterface"]
        eni_id = ni["NetworkInterfaceId"]
        used = {e.device_index for e in self.enis.values()}
        device = next(i for i in range(1, 64) if i not in used)
        try:
            # attachENI → awsGetFreeDeviceNumber: DescribeInstances for the device indexes in use
            yield from self.call("describe_instances", "DescribeInstances", InstanceIds=[self.node.instance_id])
            att = yield from self.call(
                "attach_network_interface",
                "AttachNetworkInterface",
                InstanceId=self.node.instance_id,
                NetworkInterfaceId=eni_id,
                DeviceIndex=device,
                NetworkCardIndex=0,
            )
        except ClientError:
            self.owner.counts["attach_failed"] += 1
            yield from self.call("delete_network_interface", "DeleteNetworkInterface", NetworkInterfaceId=eni_id)
            return
        self.enis[eni_id] = _Eni(eni_id, device, now, primary=False)
        try:
            yield from self.call(
                "modify_network_interface_attribute",
                "ModifyNetworkInterfaceAttribute",
                NetworkInterfaceId=eni_id,
                Attachment={"AttachmentId": att["AttachmentId"], "DeleteOnTermination": True},
            )
        except ClientError:
            self.owner.counts["modify_failed"] += 1
        visible = yield from self.wait_imds(eni_id)
        if not visible:
            self.owner.counts["attach_not_visible"] += 1  # ipamd's reconcile finds the ENI later
        self.pool.add(
            eni_id,
            [a["PrivateIpAddress"] for a in ni.get("PrivateIpAddresses", []) if not a.get("Primary")],
            [p["Ipv4Prefix"] for p in ni.get("Ipv4Prefixes", [])],
        )

    def create_eni(self, n: int, count_key: str) -> Proc[dict[str, Any] | None]:
        """``createENI`` (see the module docstring): the new ENI, or None with no subnet to try."""
        cluster = self.node.spec.cluster
        args: dict[str, Any] = {
            "Description": f"aws-K8S-{self.node.instance_id}",
            "TagSpecifications": [
                {
                    "ResourceType": "network-interface",
                    "Tags": [
                        {"Key": TAG_CLUSTER_NAME, "Value": cluster},
                        {"Key": TAG_INSTANCE_ID, "Value": self.node.instance_id},
                        {"Key": TAG_CREATED_AT, "Value": f"{self.w.now():.0f}"},
                    ],
                }
            ],
            count_key: n,
        }
        subnets = [self.node.spec.subnet]
        if self.custom:
            entry = self.custom.get(self.node.spec.az)
            if entry is None:
                self.owner.counts["no_eniconfig"] += 1
                return None
            subnets = entry.subnets[:1]
            if entry.security_groups:
                args["Groups"] = list(entry.security_groups)
        elif self.discovery:
            try:  # getVpcSubnets: the VPC's subnets in the node's zone
                out = yield from self.call(
                    "describe_subnets",
                    "DescribeSubnets",
                    Filters=[
                        {"Name": "vpc-id", "Values": [self.w.vpc_id]},
                        {"Name": "availability-zone", "Values": [self.node.spec.az]},
                    ],
                )
            except ClientError:
                self.owner.counts["describe_subnets_failed"] += 1  # falls back to the primary ENI's subnet
            else:
                found = sorted(out.get("Subnets", []), key=lambda x: -int(x.get("AvailableIpAddressCount", 0)))
                subnets = [
                    x["SubnetId"]
                    for x in found
                    if x["SubnetId"] == self.node.spec.subnet
                    or any(t.get("Key") == TAG_SUBNET_ROLE for t in x.get("Tags", []))
                ] or subnets
        last: ClientError | None = None
        for sid in subnets:
            try:
                created: dict[str, Any] = yield from self.call(
                    "create_network_interface", "CreateNetworkInterface", SubnetId=sid, **args
                )
                return created
            except ClientError as exc:  # createENI: the next subnet
                last = exc
        assert last is not None
        raise last

    def wait_imds(self, eni_id: str) -> Proc[bool]:
        """``waitForENIAndIPsAttached``: read IMDS up to 12 times, backing off 0.1 s ×2 (cap 60 s, +≤15 %)."""
        d = IMDS_WAIT_FIRST_S
        for i in range(IMDS_WAIT_TRIES):
            if self.w.eni_visible(eni_id):
                return True
            if i + 1 < IMDS_WAIT_TRIES:
                yield d * (1.0 + IMDS_WAIT_JITTER * self.w.rng.random())
                d = min(IMDS_WAIT_MAX_S, d * 2.0)
        return False

    def release(self, over_units: int) -> Proc[None]:
        now = self.w.now()
        if self.cfg.prefix_mode:
            best = max(self.enis, key=lambda e: len(self.pool.free_prefixes_on(e)))
            prefixes = self.pool.free_prefixes_on(best)[:over_units]
            if not prefixes:
                return
            self.pool.remove(best, prefixes=prefixes)
            try:
                yield from self.call(
                    "unassign_private_ip_addresses",
                    "UnassignPrivateIpAddresses",
                    NetworkInterfaceId=best,
                    Ipv4Prefixes=prefixes,
                )
            except ClientError:
                self.pool.add(best, prefixes=prefixes)
                raise
            return
        best = max(self.enis, key=lambda e: len(self.pool.free_on(e, now)))
        ips = self.pool.free_on(best, now)[:over_units]
        if not ips:
            return
        self.pool.remove(best, ips=ips)
        try:
            yield from self.call(
                "unassign_private_ip_addresses",
                "UnassignPrivateIpAddresses",
                NetworkInterfaceId=best,
                PrivateIpAddresses=ips,
            )
        except ClientError:
            self.pool.add(best, ips=ips)
            raise

    def free_eni(self) -> Proc[None]:
        now = self.w.now()
        for e in sorted(self.enis.values(), key=lambda e: -e.device_index):
            if e.primary or now - e.created_at < ENI_MIN_AGE_S or self.pool.used_on(e.eni_id) > 0:
                continue
            self.pool.drop_eni(e.eni_id)
            del self.enis[e.eni_id]
            eni = self.w.emu.enis.get(e.eni_id)
            if eni is not None and eni.attachment is not None:
                yield from self.call(
                    "detach_network_interface", "DetachNetworkInterface", AttachmentId=eni.attachment.id
                )
            yield from wait_until(functools.partial(self.w.eni_gone_or_detached, e.eni_id), POLL_S, ATTACH_WAIT_S)
            yield from self.call("delete_network_interface", "DeleteNetworkInterface", NetworkInterfaceId=e.eni_id)
            return


class VpcCni:
    """Per-node ipamd on every node (see the module docstring)."""

    name = "vpc-cni"

    def __init__(self, world: BenchWorld) -> None:
        from collections import Counter

        self.w = world
        self.ipamds: dict[str, Ipamd] = {}
        self.counts: Counter[str] = Counter()

    def start(self) -> None:
        self.w.schedule(self._join, self._add, self._delete)

    def _join(self, node: NodeRt) -> None:
        d = Ipamd(self.w, node, self)
        self.ipamds[node.spec.name] = d
        spawn(self.w.loop, d.main())

    def _add(self, node: NodeRt, pod: str) -> None:
        self.ipamds[node.spec.name].cni_add(pod)

    def _delete(self, node: NodeRt, pod: str) -> None:
        self.ipamds[node.spec.name].cni_del(pod)

    def busy(self) -> bool:
        return any(d.busy for d in self.ipamds.values())

    def notes(self) -> list[str]:
        return [f"{k}: {v}" for k, v in sorted(self.counts.items())]
