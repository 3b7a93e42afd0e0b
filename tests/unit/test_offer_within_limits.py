"""An ENI's offer names at most what a report's offer may (``MAX_IPS_PER_ENI`` addresses,
``MAX_PREFIXES_PER_ENI`` prefixes), the longest quarantined first. The simulation's seed 1041591:
after a lost checkpoint an ENI's 49 addresses were held as offered, EC2 then replaced all of
them, and the old ones stayed quarantined for their offer's answer beside 49 new ones also held
as offered: an offer of 98 made every report invalid (``ReleaseOffer``'s limit), and the node sent
none for 410 s, the old offers' answer among what it never got."""

from __future__ import annotations

import ipaddress

from node_agent import offers
from node_agent.records import Addr, EniRecord
from tests.helpers.controller import PRIMARY
from warmpool.messages import MAX_IPS_PER_ENI, MAX_PREFIXES_PER_ENI, ReleaseOffer


def _singles(n: int) -> EniRecord:
    e = EniRecord(PRIMARY, 0.0)
    for i in range(n):
        ip = f"10.0.{i // 200}.{10 + i % 200}"
        e.addrs[ip] = Addr(ip, quarantined_at=1000.0 - i)  # the later in the list, the longer quarantined
        e.ips.append(ip)
    return e


def test_an_offer_of_more_singles_than_a_report_may_name_keeps_the_longest_quarantined() -> None:
    e = _singles(98)
    ((eni_id, (ips, pfx)),) = offers.quarantined([e]).items()
    assert eni_id == PRIMARY.eni_id and pfx == []
    assert len(ips) == MAX_IPS_PER_ENI
    assert set(ips) == set(e.ips[98 - MAX_IPS_PER_ENI :]), "not the longest quarantined"
    assert ips == [ip for ip in e.ips if ip in set(ips)], "the ENI's order kept"
    ReleaseOffer(eni_id=eni_id, ips=ips, prefixes=pfx, quarantined_at=0.0)  # valid
    # its date is the oldest of all (the ones left out are younger): never younger than it is
    assert offers.quarantined_since([e])[eni_id] == min(a.quarantined_at or 0.0 for a in e.addrs.values())


def test_an_offer_within_the_limit_is_whole() -> None:
    e = _singles(MAX_IPS_PER_ENI)
    assert offers.quarantined([e]) == {PRIMARY.eni_id: (e.ips, [])}


def test_prefixes_are_cut_the_same_way() -> None:
    e = EniRecord(PRIMARY, 0.0)
    n = MAX_PREFIXES_PER_ENI + 5
    for j in range(n):
        p = f"10.1.{j // 16}.{(j % 16) * 16}/28"
        e.prefixes.append(p)
        for h in ipaddress.IPv4Network(p):
            e.addrs[str(h)] = Addr(str(h), prefix=p, quarantined_at=float(j))  # the first the oldest
    ((_, (ips, pfx)),) = offers.quarantined([e]).items()
    assert ips == [] and pfx == e.prefixes[:MAX_PREFIXES_PER_ENI]
