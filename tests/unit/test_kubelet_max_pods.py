"""The kubelet's own max pods (issue 24): the agent's parser of the node's files, the report's
optional field, and the rule that a report can only lower its node's ceiling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node_agent import kubelet_config as kc
from node_agent.config import ConfigError, load
from node_agent.report import build_report
from warmpool.limits import known, lowered, max_pods, pod_ceiling
from warmpool.messages import MessageError, parse_report
from warmpool.planner import node_max_pods
from warmpool.pool import PoolConfig

REPORT = {
    "schema": "warmpool.report/v1",
    "cluster": "c1",
    "node": "n1",
    "instance_id": "i-0123456789abcdef0",
    "instance_type": "m5.large",
    "availability_zone": "us-east-1a",
    "seq": 1,
    "sent_at": 1.0,
}


# --- the parser -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"kind": "KubeletConfiguration", "maxPods": 58}', 58),  # AL2 / AL2023 JSON
        ('{"kind": "KubeletConfiguration"}', None),  # AL2 with --use-max-pods false
        ('{"maxPods": 0}', None),  # the kubelet's "unset"
        ('{"maxPods": null}', None),
        ("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\n", 110),  # YAML
        ("maxPods: 29 # from the formula\r\n", 29),
        ("---\nkind: KubeletConfiguration\nmaxPods:   17\n", 17),
        ("kind: KubeletConfiguration\nevictionHard:\n  maxPods: 3\n", None),  # indented: not the top level
        ("kind: KubeletConfiguration\n# maxPods: 3\n", None),  # a comment
        ("maxPods: 0\n", None),
        ("", None),
        ("- maxPods: 3\n", None),  # a YAML list: no top-level key
    ],
)
def test_a_config_gives_its_max_pods(text: str, expected: int | None) -> None:
    assert kc.parse_config(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"maxPods": 2000}', "outside"),  # hostile or absurd: never sent
        ('{"maxPods": -1}', "outside"),
        ('{"maxPods": "110"}', "not a whole number"),
        ('{"maxPods": true}', "not a whole number"),
        ('{"maxPods": 1.5}', "not a whole number"),
        ('{"maxPods": 1', "not JSON"),
        ('{"maxPods": 1} [2]', "not JSON"),
        ("maxPods: 1e3\n", "not a whole number"),
        ("maxPods: '110'\n", "not a whole number"),
        ("maxPods: 5\nmaxPods: 6\n", "2 times"),
        ("maxPods: 99999\n", "outside"),
    ],
)
def test_a_config_that_says_max_pods_oddly_is_refused(text: str, why: str) -> None:
    with pytest.raises(kc.KubeletConfigError, match=why):
        kc.parse_config(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Service]\nEnvironment='KUBELET_EXTRA_ARGS=--node-labels=a=b --max-pods=110'\n", 110),  # AL2 bootstrap.sh
        ("[Service]\nEnvironment='KUBELET_EXTRA_ARGS=--max-pods=58 --max-pods=30'\n", 30),  # the last one wins
        ('NODEADM_KUBELET_ARGS="--node-ip=10.0.0.1 --max-pods 42"\n', 42),
        ("[Service]\nEnvironment='KUBELET_ARGS=--node-ip=10.0.0.1 --v=2'\n", None),
        ("# --max-pods=5\n", None),
        ("--max-pods-per-core=3\n", None),
    ],
)
def test_flags_give_the_last_max_pods(text: str, expected: int | None) -> None:
    assert kc.parse_flags(text) == expected


def test_a_flag_out_of_range_is_refused() -> None:
    with pytest.raises(kc.KubeletConfigError, match="outside"):
        kc.parse_flags("KUBELET_EXTRA_ARGS=--max-pods=0\n")
    with pytest.raises(kc.KubeletConfigError, match="not a whole number"):
        kc.parse_flags("KUBELET_EXTRA_ARGS=--max-pods=$MAX\n")


@pytest.mark.parametrize(
    ("config", "drop_ins", "flags", "expected"),
    [
        (58, [], [], 58),
        (58, [None, 20], [], 20),  # a drop-in over the file
        (58, [20, 30], [], 30),  # in order, the last wins
        (58, [20], [110], 110),  # the flag over everything, even when higher
        (None, [None], [None], None),
        (None, [], [17], 17),
    ],
)
def test_the_layers_resolve_in_the_kubelets_order(config, drop_ins, flags, expected) -> None:
    assert kc.resolve(config, drop_ins, flags) == expected


def _files(tmp: Path) -> tuple[Path, Path]:
    kubelet = tmp / "kubelet"
    unit = tmp / "kubelet.service.d"
    kubelet.mkdir()
    unit.mkdir()
    return kubelet, unit


def test_reading_the_node_al2023_with_a_nodeadm_drop_in(tmp_path: Path) -> None:
    kubelet, unit = _files(tmp_path)
    (kubelet / "config.json").write_text(json.dumps({"kind": "KubeletConfiguration", "maxPods": 29}))
    (kubelet / "config.json.d").mkdir()
    (kubelet / "config.json.d" / "00-nodeadm.conf").write_text(json.dumps({"maxPods": 40}))
    (kubelet / "config.json.d" / "10-more.conf").write_text(json.dumps({"maxPods": 35}))
    (kubelet / "config.json.d" / "20-ignored.json").write_text(json.dumps({"maxPods": 3}))  # not *.conf
    found = kc.read([str(kubelet / "config.json"), str(kubelet / "config")], [str(unit)])
    assert found == kc.Found(35, str(kubelet / "config.json.d" / "10-more.conf"))


def test_reading_the_node_al2_with_extra_args(tmp_path: Path) -> None:
    kubelet, unit = _files(tmp_path)
    (kubelet / "kubelet-config.json").write_text(json.dumps({"kind": "KubeletConfiguration", "maxPods": 29}))
    (unit / "10-kubelet-args.conf").write_text("[Service]\nEnvironment='KUBELET_ARGS=--v=2'\n")
    (unit / "30-kubelet-extra-args.conf").write_text("[Service]\nEnvironment='KUBELET_EXTRA_ARGS=--max-pods=20'\n")
    files = [str(kubelet / "config.json"), str(kubelet / "kubelet-config.json")]
    assert kc.read(files, [str(unit)]) == kc.Found(20, str(unit / "30-kubelet-extra-args.conf"))


def test_reading_the_node_bottlerocket_yaml(tmp_path: Path) -> None:
    kubelet, unit = _files(tmp_path)
    (kubelet / "config").write_text("kind: KubeletConfiguration\nmaxPods: 110\n")
    assert kc.read([str(kubelet / "config.json"), str(kubelet / "config")], [str(unit)]).max_pods == 110


def test_nothing_on_the_node_is_not_sent_and_never_raises(tmp_path: Path) -> None:
    found = kc.read([str(tmp_path / "config.json")], [str(tmp_path / "missing.d")])
    assert found.max_pods is None and found.source.startswith("not sent: none of")
    (tmp_path / "config.json").write_text('{"maxPods": 5000}')
    bad = kc.read([str(tmp_path / "config.json")], [])
    assert bad.max_pods is None and "outside 1..1000" in bad.source
    (tmp_path / "config.json").write_bytes(b"{" + b" " * (kc.MAX_FILE_BYTES + 1) + b"}")
    assert "larger than" in kc.read([str(tmp_path / "config.json")], []).source
    (tmp_path / "config.json").write_text('{"kind": "KubeletConfiguration"}')
    assert "sets no maxPods" in kc.read([str(tmp_path / "config.json")], []).source


def test_the_settings_name_the_files_and_none_turns_them_off() -> None:
    base = {"CLUSTER_NAME": "c1"}
    cfg = load(base)
    assert cfg.kubelet_config == kc.DEFAULT_CONFIG_FILES and cfg.kubelet_flags == kc.DEFAULT_FLAG_FILES
    cfg = load({**base, "WARMPOOL_KUBELET_CONFIG": "/a/b.json, /c", "WARMPOOL_KUBELET_FLAGS": "none"})
    assert cfg.kubelet_config == ("/a/b.json", "/c") and cfg.kubelet_flags == ()
    with pytest.raises(ConfigError, match="WARMPOOL_KUBELET_CONFIG"):
        load({**base, "WARMPOOL_KUBELET_CONFIG": "relative.json"})


# --- the rule: a report can only lower its node's ceiling ---------------------------------------


@pytest.mark.parametrize(
    ("ceiling", "kubelet", "expected"),
    [
        (29, None, 29),
        (29, 0, 29),
        (29, 20, 20),  # lowers
        (29, 110, 29),  # never raises
        (29, 29, 29),
        (0, 17, 17),  # no cap (vCPUs unknown): the kubelet's is the only one
        (0, None, 0),
    ],
)
def test_the_kubelets_value_only_lowers(ceiling: int, kubelet: int | None, expected: int) -> None:
    assert lowered(ceiling, kubelet) == expected


def test_the_allocators_ceiling_is_the_min_of_its_own_and_the_reports() -> None:
    lim = known("m5.large")
    plain = parse_report(REPORT)
    assert node_max_pods(plain, lim) == max_pods(lim) == 29  # an older agent's report: as before
    assert node_max_pods(parse_report({**REPORT, "kubelet_max_pods": 12}), lim) == 12
    assert node_max_pods(parse_report({**REPORT, "kubelet_max_pods": 500}), lim) == 29  # cannot raise it
    assert node_max_pods(parse_report({**REPORT, "kubelet_max_pods": 500}), lim, override=250) == 250
    assert node_max_pods(parse_report({**REPORT, "kubelet_max_pods": 100}), lim, override=250) == 100
    prefix = parse_report({**REPORT, "mode": "prefix", "kubelet_max_pods": 58})
    assert node_max_pods(prefix, lim) == 58 < max_pods(lim, prefix=True) == 110


def test_the_agents_pool_uses_the_same_min() -> None:
    from node_agent.controller import PoolController
    from node_agent.datastore import Datastore
    from node_agent.records import NodeIdentity

    ident = NodeIdentity("c1", "n1", "i-0123456789abcdef0", "m5.large", "us-east-1a")
    lim = known("m5.large")
    for pool, expected in [
        (PoolConfig(), 29),
        (PoolConfig(kubelet_max_pods=12), 12),
        (PoolConfig(kubelet_max_pods=60), 29),
        (PoolConfig(max_pods=250, kubelet_max_pods=60), 60),
    ]:
        c = PoolController(ident, lim, pool, Datastore())
        assert (
            c.pool.max_pods
            == expected
            == pod_ceiling(lim, prefix=False, override=pool.max_pods, kubelet=pool.kubelet_max_pods)
        )


# --- the wire -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1001, 10**9, "29", 29.0, True, [29]])
def test_a_hostile_kubelet_max_pods_is_refused(value: object) -> None:
    with pytest.raises(MessageError) as err:
        parse_report({**REPORT, "kubelet_max_pods": value})
    assert err.value.reason == "invalid" and "kubelet_max_pods" in err.value.detail


def test_the_agent_leaves_the_field_out_when_it_knows_none() -> None:
    from node_agent.datastore import Datastore
    from node_agent.records import NodeIdentity

    ident = NodeIdentity("c1", "n1", "i-0123456789abcdef0", "m5.large", "us-east-1a")

    def report(pool: PoolConfig) -> str:
        r = build_report(ident, pool, Datastore(), {}, seq=1, now=1.0, signed=None, skipped=lambda *_: None)
        return r.to_json()

    without = json.loads(report(PoolConfig()))
    assert "kubelet_max_pods" not in without  # an allocator from before the field takes it
    assert parse_report(without).kubelet_max_pods is None
    with_it = json.loads(report(PoolConfig(kubelet_max_pods=40)))
    assert with_it["kubelet_max_pods"] == 40 and parse_report(with_it).kubelet_max_pods == 40
