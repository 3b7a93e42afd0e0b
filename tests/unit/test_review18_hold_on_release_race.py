"""Review 18, R2 (a leak, never a second holder): ``lift_unfounded_holds`` reads ``HOLD_ON_RELEASE``
outside the datastore's lock, filters it, and writes the filtered copy back inside its batch. In
production the lift runs on the agent's loop while the CNI socket server's threads run DELs and GCs;
one that releases a doubtful record between the read and the write hands that record's address to
its holder and drops the address's entry (``Datastore.release``), and the lift then writes the entry
back. The address is then held by that holder *and* still marked to be handed to it on the release
of whichever record holds it next: once the holder lets it go (its pod's DEL) and a new pod gets it,
that pod's DEL hands it to the holder again instead of freeing it (held for as long as the holder's
name is on the host, or offered back as of unknown origin by the next lift: an address replaced for
nothing). The simulation runs each CNI call and each tick whole, one at a time, so it cannot draw it.

The interleaving is forced here by running the other thread's release where the lift's batch begins
(the first moment it takes the lock). Fixed: the lift reads under the lock, inside its batch (the
test adapted to the design that replaced bf0e084's: the lift ends ``unrouted`` hand-ons once the
hold's reason is empty)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from node_agent.agent import HOLD_REASON_META, lift_unfounded_holds
from node_agent.datastore import HOLD_ON_RELEASE, Datastore
from node_agent.records import UNROUTED_HOLDER
from tests.helpers.controller import PRIMARY

X, Z = "10.0.0.50", "10.0.0.51"
V = "eniaaaaaaaaaaaa"


class _NoHolders:
    """The controller's two calls the lift makes, on a datastore whose holders are none."""

    def holders_on_held_enis(self, holders: Any) -> bool:
        return False

    def release_unknown_holders(self, now: float, holders: Any) -> list[Any]:
        return []


def test_a_release_between_the_lifts_read_and_write_is_not_undone() -> None:
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, [X, Z])
    assert ds.assign("old", "eth0", "/var/run/netns/old", 1.0) is not None  # doubtful: X, routed via V
    assert ds.assign("gone", "eth0", "/var/run/netns/gone", 1.0) is not None  # doubtful: Z, routed via U
    assert ds.lookup("old", "eth0").ip == X  # type: ignore[union-attr]
    ds.set_meta(HOLD_ON_RELEASE, {X: V, Z: UNROUTED_HOLDER})
    ds.set_meta(HOLD_REASON_META, [])  # every pod the start's hold stood for DELeted: the lift is due
    plain = ds.batch

    @contextlib.contextmanager
    def batch_after_a_gc() -> Iterator[None]:
        ds.batch = plain  # type: ignore[method-assign]
        ds.release("old", "eth0", 2.0)  # the CNI thread: the runtime's GC of `old` (X handed to V)
        with plain():
            yield

    ds.batch = batch_after_a_gc  # type: ignore[method-assign]
    assert lift_unfounded_holds(ds, _NoHolders(), 3.0) == []  # type: ignore[arg-type]
    assert Z not in (ds.meta.get(HOLD_ON_RELEASE) or {}), "setup: the lift ends the unrouted hand-on"
    assert ds.recovered_holder(X) == V, "setup: the GC handed X to V"
    holds = ds.meta.get(HOLD_ON_RELEASE) or {}
    # V's pod goes (its DEL releases V's holder), and a new pod gets X, then goes too
    ds.release_recovered(V, 4.0)
    got = ds.assign("next", "eth0", "/var/run/netns/next", 5.0)
    assert got is not None and got.ip == X
    ds.release("next", "eth0", 6.0)
    assert X not in holds and ds.recovered_holder(X) is None, (
        f"{X}: the entry the GC consumed is back ({holds}); the next pod's release handed X to "
        f"{ds.recovered_holder(X)} instead of freeing it"
    )
