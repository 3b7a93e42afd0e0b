"""Review 22, R4 (docs out of step, new in b7123a0): docs/safety.md's "An ADD cut half-way (stop 47)"
names among the change's tests "the simulation's `add-cut` kind (docs/reliability.md)". The
simulation draws no such kind (no kind, no ``host-wiring`` variant or follow-up of that name) and
docs/reliability.md does not mention it: an ADD cut between its veth and its route, then retried,
is drawn nowhere, so the sweeps say nothing of ``_known_again``'s first case. Either the kind is
built (``SimPods`` would need an ADD stopped after the veth pair, the agent killed, the runtime
retrying), or the sentence goes."""

from __future__ import annotations

import re
from pathlib import Path

from simulation import schedule

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else len(text)]


def _drawn() -> set[str]:
    names: set[str] = set()
    for attr in dir(schedule):
        value = getattr(schedule, attr)
        if attr.isupper() and (attr.endswith("_KINDS") or attr.endswith("_VARIANTS") or attr.endswith("_THEN")):
            names |= {v for v in value if isinstance(v, str)}
    return names


def test_the_simulation_kinds_the_half_way_section_names_exist() -> None:
    section = _section((ROOT / "docs" / "safety.md").read_text(), "**An ADD cut half-way (stop 47).**")
    named = set(re.findall(r"the simulation's `([a-z0-9-]+)` kind", section))
    assert named, "setup: the section names the simulation kind its tests draw"
    missing = named - _drawn()
    assert not missing, f"docs/safety.md names simulation kinds that are not drawn: {sorted(missing)}"
    reliability = (ROOT / "docs" / "reliability.md").read_text()
    assert all(f"`{k}`" in reliability for k in named), "docs/reliability.md does not describe them"
