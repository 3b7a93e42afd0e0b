"""Review 27, D1 (docs out of step with 9dbe1f6): the change fixed seed 14955 and made a failed ADD
tear down only a veth pair its set-up made (``node_agent.hostnet.setup_left``), releasing the
address it took or holding it for the attachment's veth; none of the docs says so.

* README.md's simulation row still calls 14955 "open, strict xfails", and docs/reliability.md
  still has it "pinned as strict xfails, open (``tests/sim/test_stop48_open.py``)", a file that no
  longer pins it; neither names ``tests/sim/test_seed_14955.py``, which does.
* docs/safety.md, the safety argument, says of a failed ADD only that an address whose teardown
  failed is held for the veth (review 22, R5). The new rule (a pair the ADD did not make is left;
  what its set-up reached decides between a release and a hold) is a new way an address leaves a
  record with a pod's interface possibly carrying it, and the argument does not name it.

Fixed so in stop 49 (the strict xfails removed)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _paragraphs_naming(text: str, word: str) -> list[str]:
    return [p for p in text.split("\n\n") if word in p]


def test_the_docs_that_name_seed_14955_say_where_it_is_fixed() -> None:
    for doc in ("README.md", "docs/reliability.md"):
        named = _paragraphs_naming((ROOT / doc).read_text(), "14955")
        assert named, f"setup: {doc} names seed 14955"
        assert any("tests/sim/test_seed_14955.py" in p for p in named), (
            f"{doc} names seed 14955 but not the test that pins its fix (tests/sim/test_seed_14955.py)"
        )


def test_the_safety_argument_states_what_a_failed_add_leaves() -> None:
    safety = (ROOT / "docs" / "safety.md").read_text()
    assert "setup_left" in safety or "SetupLeft" in safety, (
        "docs/safety.md does not say that a failed ADD tears down only a pair its set-up made "
        "(hostnet.setup_left), nor when it releases or holds the address it took"
    )
