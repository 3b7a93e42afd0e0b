"""What the start's read of each listed pod's interface costs (``node_agent.agent.carried_disagreements``
through ``NetlinkPods.carried``, review 31): N pods, each a veth pair whose host side is named as the
agent names it and whose pod side (``eth0`` in the pod's namespace) carries the pod's address, and a
datastore listing the N pods. Prints the time of one ``carried_disagreements`` over them, and of one
host link dump (``Netlink.link_by_name``). Each pod's read made one such dump (N dumps of N links)
until ``NetlinkPods.carried_reader`` dumped them once for all (review 31, A5): measured on this
2-core machine beside a simulation sweep, 50/110/250/500 pods took 0.88/4.7/23.6/95 s before and
0.08/0.48/1.18/5.0 s after. It is given the host's wiring as the start gives it, so the look-up
of each attachment's veths of other prefixes (review 31, A1) is in the figure: 0.15/0.19/0.56/1.28 s
for 50/110/250/500 pods with it, 0.15/0.38/0.71/1.13 s before it (the same session).

With ``--holders`` the datastore holds each pod's address by a recovered holder named after its
veth (a copy written after a rebuild), no record: the start finds each veth's peer among the
namespaces pinned in /run/netns and reads it (``NetlinkPods.peers_carried``, review 31, A2): one
namespace opened and its links dumped each, 0.09/0.81/0.43/0.98 s for 50/110/250/500 holders on this
machine shared with others (noisy; the same run's record reads: 0.09/0.63/0.97 s for 50/110/250).

Run in namespaces of its own (no root needed, nothing on the host touched)::

    unshare -rnm sh -c 'mount -t tmpfs none /run && PYTHONPATH=. python tests/perf/start_carried_reads.py 50 110 250'
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from node_agent.agent import carried_disagreements
from node_agent.cniserver import NetlinkPods
from node_agent.datastore import Datastore
from node_agent.hostnet import host_veth_name
from node_agent.netlink import Netlink
from node_agent.records import EniInfo

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.4", "subnet-a", "10.0.0.0/16")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def main(counts: list[int], holders: bool = False) -> None:
    os.makedirs("/run/netns", exist_ok=True)
    made = 0
    for n in counts:
        while made < n:
            cid = f"{made:064x}"
            ns = f"p{made}"
            _ip("netns", "add", ns)
            _ip("link", "add", host_veth_name(cid, "eth0", "eni"), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", ns, "addr", "add", f"10.0.{made // 200}.{made % 200 + 20}/32", "dev", "eth0")
            made += 1
        ds = Datastore()
        ds.add_eni(PRIMARY, 0.0)
        ips = [f"10.0.{i // 200}.{i % 200 + 20}" for i in range(n)]
        ds.add_addresses(PRIMARY.eni_id, ips)
        if holders:
            ds.recover({ip: host_veth_name(f"{i:064x}", "eth0", "eni") for i, ip in enumerate(ips)}, 1.0)
        for i in range(0 if holders else n):
            assert ds.assign(f"{i:064x}", "eth0", f"/run/netns/p{i}", 1.0) is not None
        pods = NetlinkPods("", "eni")
        wiring = pods.host_wiring()  # read by the start before the check (restore_checked)
        t = time.perf_counter()
        wrong = carried_disagreements(ds, pods, wiring, "eni")  # the other prefixes' look-ups too (A1)
        whole = time.perf_counter() - t
        assert wrong == [], wrong
        if holders:  # each peer found and read (agreeing), not left out
            veths = [host_veth_name(f"{i:064x}", "eth0", "eni") for i in range(n)]
            assert len(pods.peers_carried(veths)) == n
        with Netlink.open() as nl:
            t = time.perf_counter()
            nl.link_by_name("absent")
            dump = time.perf_counter() - t
        what = "holders" if holders else "pods"
        print(f"{what}={n}: carried_disagreements {whole:.2f} s; one host link dump {dump * 1000:.1f} ms")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--holders"]
    main([int(a) for a in args] or [50, 110, 250], holders="--holders" in sys.argv[1:])
