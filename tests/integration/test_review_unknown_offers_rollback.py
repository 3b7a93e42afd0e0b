"""Hostile review of the unknown-offers change (1de634b): a rollback of the agent.

A strict xfail (runs the agent of 8bddc22 from ``git archive`` in a subprocess).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, TIMING, FakeImds
from tests.unit.test_agent_review_findings import POOL, X, listed
from tests.unit.test_agent_step6_review import _facts
from warmpool.calls import Reclaim
from warmpool.limits import known
from warmpool.messages import PoolReport
from warmpool.planner import plan_node
from warmpool.subnets import Subnet

REPO = Path(__file__).resolve().parents[2]


def open_finding(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


# --- R2. rollback: an older agent reads unknown marks as ordinary offers ------------------------

OLD = "8bddc22"

_OLD_AGENT = r"""
import json, sys
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.config import Timing
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from warmpool.limits import known
from warmpool.messages import AllocationResult
from warmpool.pool import PoolConfig

ID = NodeIdentity("demo", "node-1", "i-0123456789abcdef0", "m5.large", "us-east-1a")
PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
TIMING = Timing(cooldown_s=30, release_delay_s=60, release_timeout_s=120, heartbeat_s=60, retry_s=5)
X = sys.argv[2]

class Imds:
    def identity(self): return ID
    def interfaces(self): return [AttachedEni(PRIMARY, ["10.0.0.11", X], [])]

data = json.load(open(sys.argv[1]))
ds = Datastore(cooldown_s=0.0, checkpoint=MemoryCheckpoint(data))
ds.restore()
ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, metadata=Imds())
t = float(sys.argv[3])
ctl.start(t)
reps = []
for k in range(0, 200, 10):
    if k == 150:  # pods wait: a deficit, so the allocator's answer is a hand-back
        for i in range(3):
            ds.assign(f"p{i}", "eth0", "ns", t + k)
    reps += ctl.tick(t + k)
rep = [r for r in reps if r.release and r.pending_demand][-1]
res = AllocationResult.model_validate({"schema": "warmpool.result/v1", "cluster": "demo", "node": "node-1",
    "instance_id": ID.instance_id, "in_reply_to": rep.seq,
    "actions": [{"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}]})
ctl.apply_result(res, t + 201)
for i in range(3):
    ds.assign(f"q{i}", "eth0", "ns", t + 202)
print(json.dumps({"report": rep.to_json(), "holders": sorted(p.ip for p in ds.pods())}))
"""


def _old_tree(tmp: Path) -> Path:
    out = subprocess.run(
        ["git", "-C", str(REPO), "archive", OLD, "node_agent", "warmpool"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(out)) as tf:
        tf.extractall(tmp)
    return tmp


@open_finding(
    "open: a rollback of the agent reads a newer checkpoint's quarantine of unknown origin as "
    "ordinary offers (meta offers_unknown ignored), offers them unmarked, and takes a hand-back"
)
def test_an_older_agent_restoring_unknown_marks_offers_them_as_ordinary(tmp_path: Path) -> None:
    # New agent: checkpoint lost, the read lists .11 and X from before an unassign (row 6): both
    # quarantined, of unknown origin, checkpointed (meta offers_unknown).
    imds = FakeImds()
    t0 = 1000.0
    listed(imds, "10.0.0.11", X)
    cp = MemoryCheckpoint()
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(t0, checkpoint_lost=True)
    ctl.tick(t0 + 1)
    assert X in ctl._unknown
    ckpt = tmp_path / "ckpt.json"
    ds.flush()
    ckpt.write_text(json.dumps(cp.data))
    # Rolled back to 8bddc22 (the newer allocator stays, as the rollout order asks): it restores
    # the file (version unchanged, extras ignored) and offers X as an ordinary offer.
    old = _old_tree(tmp_path / "old")
    env = {**os.environ, "PYTHONPATH": str(old)}
    run = subprocess.run(
        [sys.executable, "-c", _OLD_AGENT, str(ckpt), X, str(t0 + 300)],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(old),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    rep = PoolReport.model_validate_json(got["report"])
    offer = next(o for o in rep.release if X in o.ips)
    # The newer allocator, book entry settled before the loss, Describe stale: a hand-back.
    subnets = (Subnet("subnet-a", "us-east-1a", "10.0.0.0/24", 0),)
    plan = plan_node(rep, _facts(["10.0.0.11", X]).inventory("demo"), known("m5.large"), subnets, cluster="demo")
    handed = [ip for c in plan.calls if isinstance(c, Reclaim) for ip in c.ips]
    assert offer.unknown or X not in handed, "an older agent's unmarked offer of X is handed back on Describe"
    assert X not in got["holders"], "the older agent gave a pod X, held on IMDS's word alone"
