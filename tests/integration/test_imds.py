"""Emulated IMDSv2 over HTTP: tokens, paths, attach delay, faults."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.imds import Imds, make_app, serve


@dataclass
class Env:
    emu: Ec2Emulator
    clock: VirtualClock
    imds: Imds
    base: str
    instance: str
    subnet: str


@pytest.fixture
def env() -> Iterator[Env]:
    clock = VirtualClock(1000.0)
    emu = Ec2Emulator(clock, Ec2Config(attach_delay_s=3.0))
    sid = emu.add_subnet(az="us-east-1b", cidr="10.1.0.0/24")
    iid = emu.run_instance("m5.xlarge", subnet_id=sid)
    app = make_app(emu)
    with serve(emu, app=app) as srv:
        yield Env(emu, clock, app, f"{srv.url}/{iid}", iid, sid)


def _token(env: Env, ttl: str = "60") -> str:
    req = urllib.request.Request(
        env.base + "/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": ttl}
    )
    with urllib.request.urlopen(req) as r:
        return str(r.read().decode())


def _get(env: Env, path: str, token: str | None) -> tuple[int, str]:
    headers = {"X-aws-ec2-metadata-token": token} if token else {}
    req = urllib.request.Request(env.base + "/latest/meta-data/" + path, headers=headers)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_get_without_token_is_refused(env: Env) -> None:
    assert _get(env, "instance-id", None)[0] == 401
    assert _get(env, "instance-id", "bogus")[0] == 401


def test_token_ttl_is_validated_and_expires(env: Env) -> None:
    with pytest.raises(urllib.error.HTTPError) as e:
        _token(env, "0")
    assert e.value.code == 400
    tok = _token(env, "10")
    assert _get(env, "instance-id", tok) == (200, env.instance)
    env.clock.advance(11)
    assert _get(env, "instance-id", tok)[0] == 401


def test_paths_an_agent_reads(env: Env) -> None:
    tok = _token(env)
    assert _get(env, "instance-type", tok) == (200, "m5.xlarge")
    assert _get(env, "placement/availability-zone", tok) == (200, "us-east-1b")
    mac = _get(env, "mac", tok)[1]
    assert _get(env, "network/interfaces/macs/", tok) == (200, f"{mac}/")
    root = f"network/interfaces/macs/{mac}/"
    assert _get(env, root + "device-number", tok) == (200, "0")
    assert _get(env, root + "network-card", tok) == (200, "0")
    assert _get(env, root + "subnet-id", tok) == (200, env.subnet)
    assert _get(env, root + "subnet-ipv4-cidr-block", tok) == (200, "10.1.0.0/24")
    assert _get(env, root + "interface-id", tok)[1].startswith("eni-")
    assert _get(env, root + "ipv4-prefix", tok)[0] == 404
    assert _get(env, "no/such/path", tok)[0] == 404


def test_attached_eni_and_addresses_appear_after_the_delay(env: Env) -> None:
    ec2 = env.emu.client()
    eni = ec2.create_network_interface(SubnetId=env.subnet, SecondaryPrivateIpAddressCount=2)["NetworkInterface"]
    eid, mac = eni["NetworkInterfaceId"], eni["MacAddress"]
    ec2.attach_network_interface(NetworkInterfaceId=eid, InstanceId=env.instance, DeviceIndex=1)
    tok = _token(env)
    assert mac not in _get(env, "network/interfaces/macs/", tok)[1]
    env.clock.advance(3.0)
    assert f"{mac}/" in _get(env, "network/interfaces/macs/", tok)[1].split("\n")
    root = f"network/interfaces/macs/{mac}/"
    assert _get(env, root + "device-number", tok) == (200, "1")
    r = ec2.assign_private_ip_addresses(NetworkInterfaceId=eid, Ipv4PrefixCount=1)
    ips = _get(env, root + "local-ipv4s", tok)[1].split("\n")
    assert ips == [a["PrivateIpAddress"] for a in eni["PrivateIpAddresses"]]
    assert _get(env, root + "ipv4-prefix", tok) == (200, r["AssignedIpv4Prefixes"][0]["Ipv4Prefix"])


def test_failing_and_slow_toggles(env: Env) -> None:
    tok = _token(env)
    env.imds.set_faults(fail_status=500, fail_next=2)
    assert _get(env, "instance-id", tok)[0] == 500
    assert _get(env, "instance-id", tok)[0] == 500
    assert _get(env, "instance-id", tok) == (200, env.instance)
    slept: list[float] = []
    env.imds._sleep = slept.append
    env.imds.set_faults(delay_s=0.4)
    assert _get(env, "instance-id", tok)[0] == 200
    assert slept == [0.4]
    env.imds.set_faults()
    assert _get(env, "instance-id", tok)[0] == 200 and slept == [0.4]


def test_other_instances_and_unknown_ones(env: Env) -> None:
    tok = _token(env)
    other = env.base.rsplit("/", 1)[0] + "/i-0000000000000dead"
    req = urllib.request.Request(other + "/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": tok})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 404


def test_imds_by_source_answers_each_instance_for_itself_and_no_one_else(env: Env) -> None:
    """The e2e tier's IMDS at 169.254.169.254 (emulated.imds.ImdsBySource): no instance in the
    path, the request's source address says which instance asks; an unknown source gets 404,
    and a token is only good for the instance it was issued to."""
    from emulated.ec2.http import Server
    from emulated.imds import ImdsBySource

    other = env.emu.run_instance("m5.large", subnet_id=env.subnet)
    whose = {"127.0.0.1": env.instance}
    with Server(ImdsBySource(env.imds, whose.get), "127.0.0.1", 0) as srv:
        by_source = Env(env.emu, env.clock, env.imds, srv.url, env.instance, env.subnet)
        token = _token(by_source)
        assert _get(by_source, "instance-id", token) == (200, env.instance)
        whose["127.0.0.1"] = other  # the same address now stands for another instance
        assert _get(by_source, "instance-id", token)[0] == 401  # the token was the first one's
        assert _get(by_source, "instance-id", _token(by_source)) == (200, other)
        whose.clear()
        assert _get(by_source, "instance-id", token)[0] == 404
