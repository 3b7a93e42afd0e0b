"""The docs name only what exists, and docs/design.md names everything external.

README.md and docs/*.md are read as Markdown: what they name in code spans and
fenced blocks (``warmpool`` subcommands and flags, environment variables, metric
names, ``make`` targets, repository paths) and their relative links are checked
against the code: the parsers the ``warmpool`` and ``warmpool-agent`` commands
build, every environment read and metric, the Makefile, the tree. The other way
round, every environment variable the code reads must be named in
docs/design.md, and every metric it emits in docs/allocator.md or docs/agent.md.
The code is read with ``ast``, not imported (importing every subcommand's module
would only inflate the tier's coverage); the machinery is
``tests/helpers/doc_names.py``.
"""

from __future__ import annotations

import re
from functools import cache

from tests.helpers import doc_names as dn

DESIGN = dn.ROOT / "docs" / "design.md"
ADDITIONS = "Contract additions"
"""docs/design.md's section of names the open issues will add: checked row by row against its ``today`` column."""

NAMED_NOT_READ = {
    # Read by other software, not by warmpool's code.
    "AWS_ENDPOINT_URL": "boto3 reads it (the local stack sets it for the functions)",
    "POWERTOOLS_METRICS_NAMESPACE": "Powertools reads it (the stack sets it)",
    "POWERTOOLS_SERVICE_NAME": "Powertools reads it (the local stack sets it)",
    "AWS_PROFILE": "the AWS CLI's and the CDK's",
    "AWS_ACCESS_KEY_ID": "the AWS CLI's and boto3's (any non-empty value against the local stack)",
    "AWS_SECRET_ACCESS_KEY": "the AWS CLI's and boto3's (any non-empty value against the local stack)",
    "CNI_PATH": "the CNI spec's: runtimes set it; the plugin calls no other plugin",
    "K8S_POD_NAMESPACE": "a key in CNI_ARGS as kubelet's runtimes pass it (node_agent.cniserver.pod_of reads it)",
    "K8S_POD_NAME": "a key in CNI_ARGS as kubelet's runtimes pass it (node_agent.cniserver.pod_of reads it)",
    "CPU_COUNT": "a variable of amazon-eks-ami's max-pods-calculator.sh, quoted",
    "WARMPOOL_DEMO_RUN": "the demo's mark in each agent's environment (demo/host.py RUN_MARK), found through /proc",
    # The VPC CNI's variables warmpool deliberately does not honour (docs/agent.md, "Not honoured").
    "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG": "custom networking: not honoured",
    "ENI_CONFIG_LABEL_DEF": "custom networking: not honoured",
    "ENI_CONFIG_ANNOTATION_DEF": "custom networking: not honoured",
    "ENABLE_POD_ENI": "security groups for pods: not honoured",
    "POD_SECURITY_GROUP_ENFORCING_MODE": "security groups for pods: not honoured",
    "DISABLE_TCP_EARLY_DEMUX": "security groups for pods: not honoured",
    "ENABLE_IPV6": "IPv4 only",
    "ENABLE_V4_EGRESS": "IPv4 only",
    "ENABLE_V6_EGRESS": "IPv4 only",
    "ENABLE_NETWORK_POLICY": "no network policy agent",
    "NETWORK_POLICY_ENFORCING_MODE": "no network policy agent",
    "ENABLE_SUBNET_DISCOVERY": "subnet choice is the allocator's",
    "DISABLE_NETWORK_RESOURCE_PROVISIONING": "the node never calls EC2 for ENIs",
    "AWS_MANAGE_ENIS_NON_SCHEDULABLE": "the node never calls EC2 for ENIs",
    "DISABLE_LEAKED_ENI_CLEANUP": "the reconcile function collects leaked ENIs",
    "ENABLE_NFTABLES": "warmpool always uses its own nftables table",
    "AWS_VPC_K8S_CNI_BACKING_STORE": "WARMPOOL_STATE_DIR instead",
    "AWS_VPC_K8S_CNI_LOGLEVEL": "logs go to stdout",
    "AWS_VPC_K8S_CNI_LOG_FILE": "logs go to stdout",
    "AWS_VPC_K8S_PLUGIN_LOG_FILE": "the plugin's log is its result",
    "AWS_VPC_K8S_PLUGIN_LOG_LEVEL": "the plugin's log is its result",
    "DISABLE_INTROSPECTION": "one endpoint, WARMPOOL_METRICS_ADDR",
    "DISABLE_METRICS": "one endpoint, WARMPOOL_METRICS_ADDR",
    "INTROSPECTION_BIND_ADDRESS": "one endpoint, WARMPOOL_METRICS_ADDR",
    "ANNOTATE_POD_IP": "no Kubernetes API access from the agent",
    "ENABLE_BANDWIDTH_PLUGIN": "chain `bandwidth` in the conflist instead",
}
"""Environment variables a doc may name although no code of this repository reads them, and why."""

LINUX_CAPABILITIES = {
    *("CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP"),
    *("LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER"),
    *("SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE"),
    *("SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP"),
    *("MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF"),
    "CHECKPOINT_RESTORE",
}
"""capabilities(7): named as the manifest does (``NET_ADMIN``) or as the kernel does (``CAP_NET_ADMIN``)."""

DECLARED_NOT_EMITTED: dict[str, str] = {}
"""Metric names warmpool/names.py declares that no code emits (a doc naming one must say so)."""


def _docs() -> list[dn.Doc]:
    return [dn.parse(p) for p in dn.doc_files()]


def _code(*, additions: bool = False) -> list[dn.Code]:
    """Every code span and fenced line of the docs; the design's contract additions only when asked."""
    return [c for d in _docs() for c in d.code if (c.doc == "docs/design.md" and c.section == ADDITIONS) == additions]


# --- the command line ----------------------------------------------------------------------------


def cli() -> dict[tuple[str, str], set[str]]:
    """(program, subcommand) -> the flags its parser takes."""
    return dn.cli_flags()


def _command_problems(code: list[dn.Code]) -> list[str]:
    problems = []
    for c in code:
        for cmd in dn.commands(c):
            known = cli().get((cmd.prog, cmd.sub))
            if known is None:
                problems.append(f"{c.doc}: `{cmd.prog} {cmd.sub}` is not a command (in {c.text!r})")
                continue
            problems += [
                f"{c.doc}: `{cmd.prog} {cmd.sub}` has no flag {flag} (in {c.text!r})"
                for flag in cmd.flags
                if flag not in known
            ]
    return problems


def test_the_parsers_are_found():
    """The check below is only as good as this: every subcommand's parser, with its flags."""
    assert {sub for prog, sub in cli() if prog == "warmpool"} == {
        "local",
        "bench",
        "demo",
        "sim",
        "plan",
        "max-pods",
        "cost",
    }
    assert "--instance-type" in cli()["warmpool", "max-pods"]
    assert "--seeds" in cli()["warmpool", "sim"]
    assert "--no-functions" in cli()["warmpool", "local"]
    assert "--dest" in cli()["warmpool-agent", "install-cni"]
    from warmpool_cli.max_pods import build_parser  # the one parser cheap to build: the static reading agrees

    assert cli()["warmpool", "max-pods"] == {opt for action in build_parser()._actions for opt in action.option_strings}


def test_every_command_and_flag_the_docs_name_exists():
    assert _command_problems(_code()) == []


def test_the_docs_name_commands_at_all():
    named = {(cmd.prog, cmd.sub) for c in _code() for cmd in dn.commands(c)}
    assert named >= {("warmpool", s) for s in ("local", "bench", "demo", "sim", "plan", "max-pods")}


def test_design_lists_every_flag_of_every_command():
    """docs/design.md's command-line table: each row's flags are exactly what the parser takes."""
    rows = {}
    for line in dict(dn.parse(DESIGN).sections)["Command line"].splitlines():
        cells = line.replace("\\|", "/").split("|")  # `a\|b` is a pipe inside a cell
        if len(cells) >= 4 and (m := re.fullmatch(r"\s*`warmpool ([a-z-]+)[^`]*`\s*", cells[1])):
            rows[m[1]] = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", cells[2]))
    assert set(rows) == {sub for prog, sub in cli() if prog == "warmpool"}
    wrong = {
        sub: (sorted(flags - cli()["warmpool", sub]), sorted(cli()["warmpool", sub] - flags - {"-h", "--help"}))
        for sub, flags in rows.items()
        if flags != cli()["warmpool", sub] - {"-h", "--help"}
    }
    assert wrong == {}, "(named but not taken, taken but not named)"


def test_the_design_scenario_example_is_a_valid_scenario():
    import yaml

    from bench.scenario import parse_scenario

    lines = [c.text for c in dn.parse(DESIGN).code if c.section == "Scenario file" and c.lang == "yaml"]
    scenario = parse_scenario(yaml.safe_load("\n".join(lines)), "docs/design.md")
    assert {f.kind for f in scenario.faults} == {
        "throttle-storm",
        "lambda-crash",
        "duplicate-delivery",
        "attach-failure",
        "subnet-exhausted",
    }


def _words(section: str) -> set[str]:
    return {w for c in dn.parse(DESIGN).code if c.section == section for w in re.findall(r"[A-Za-z_][\w]*", c.text)}


def _fields(*models: type) -> set[str]:
    return {name for m in models for name in m.model_fields}  # type: ignore[attr-defined]


def test_design_names_every_key_of_the_scenario_file_and_the_bench_output():
    from bench import output, scenario

    scenario_keys = _fields(
        scenario.Scenario,
        scenario.Account,
        scenario.Ec2Timing,
        scenario.ClusterSpec,
        scenario.Env,
        scenario.SubnetSpec,
        scenario.NodeGroup,
        scenario.WorkloadStep,
        scenario.Repeat,
        scenario.Fault,
    )
    assert sorted(scenario_keys - _words("Scenario file")) == []
    output_keys = _fields(
        output.BenchResult, output.StrategyResult, output.Percentiles, output.LowerBound, output.FinalNode
    )
    assert sorted(output_keys - _words("Bench output")) == []


def _doc_words(doc: str, section: str) -> set[str]:
    return {
        w for c in dn.parse(dn.ROOT / doc).code if c.section == section for w in re.findall(r"[A-Za-z_]\w*", c.text)
    }


def test_design_names_every_key_the_commands_and_the_agent_answer_with():
    max_pods = dn.dict_keys("node_agent.agent", "Agent.view_max_pods")
    assert "pool_ceiling" in max_pods
    assert sorted(max_pods - _words("The agent's HTTP endpoints")) == []
    assert sorted(max_pods - _doc_words("docs/agent.md", "Observability")) == []
    outputs = dn.attribute_keys("emulated.local", "LocalStack", "outputs")
    assert {"endpoint", "reports_queue_url", "imds_base"} <= outputs
    assert sorted(outputs - _words("Command line")) == []
    demo = dn.dict_keys("demo.report", "DemoReport.to_json") | dn.dict_keys("demo.dataplane", "Results.to_json")
    assert sorted(demo - _words("Command line") - _doc_words("docs/demo.md", "The report (`--json`)")) == []


def test_every_make_target_the_docs_name_exists():
    defined = dn.make_targets_defined()
    missing = [f"{c.doc}: `make {t}`" for c in _code() for t in dn.make_targets(c) if t not in defined]
    assert missing == []


# --- the contract additions ------------------------------------------------------------------------


def _additions() -> list[tuple[str, bool]]:
    """(the row's name cell, whether it exists today) for each row of design.md's additions table."""
    text = dict(dn.parse(DESIGN).sections)[ADDITIONS]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2] in ("yes", "no"):
            rows.append((cells[0], cells[2] == "yes"))
    return rows


def _exists(name: str) -> bool | None:
    """Whether a row's name exists in the code, when it is a kind of name the code can answer for."""
    spans = re.findall(r"`([^`]+)`", name)
    checks: list[bool] = []
    for span in spans:
        code = dn.Code("docs/design.md", ADDITIONS, span)
        cmds = list(dn.commands(code))
        for cmd in cmds:
            known = cli().get((cmd.prog, cmd.sub))
            checks.append(known is not None and all(f in known for f in cmd.flags))
        for target in dn.make_targets(code):
            checks.append(target in dn.make_targets_defined())
        if re.fullmatch(r"[a-z][\w.-]*(?:/[\w.-]+)*(?:/|\.(?:md|py|yaml|json))", span) and "/" in span:
            checks.append((dn.ROOT / span).exists())  # a path: `charts/warmpool/`, `docs/design.md`
        for key in re.findall(r"-c ([a-z_]+)=", span):
            checks.append(key in (dn.ROOT / "infra" / "config.py").read_text())
    return all(checks) if checks else None


def test_the_contract_additions_say_what_exists_today():
    rows = _additions()
    assert len(rows) >= 10, rows
    wrong = []
    for name, today in rows:
        exists = _exists(name)
        if exists is not None and exists != today:
            wrong.append(f"{name!r}: the table says {'yes' if today else 'no'}, the code says {exists}")
    assert wrong == []


# --- environment variables -----------------------------------------------------------------------


@cache
def _known_names() -> set[str]:
    """Upper-case names a doc may use: variables some code reads (tests and scripts included),
    constants of the code, the shell's and the manifests' variables, and NAMED_NOT_READ."""
    return set(dn.env_reads(dn.ALL_CODE)) | dn.python_constants() | dn.shell_and_template_names() | set(NAMED_NOT_READ)


def _not_a_variable(name: str) -> bool:
    return name in LINUX_CAPABILITIES or name.removeprefix("CAP_") in LINUX_CAPABILITIES


def test_every_environment_variable_the_docs_name_is_read_somewhere():
    code = _code()
    # An example's own shell variable (`MAX_PODS=$(warmpool max-pods ...)`) is the example's.
    local = {m for c in code if c.lang in dn.SHELL for m in re.findall(r"^\s*([A-Z][A-Z0-9_]*)=\$\(", c.text)}
    unknown = sorted(
        {
            f"{c.doc}: {n}"
            for c in code
            for n in dn.env_names(c)
            if n not in _known_names() and n not in local and not _not_a_variable(n)
        }
    )
    assert unknown == []


def test_design_names_every_environment_variable_the_code_reads():
    named = {n for c in dn.parse(DESIGN).code if c.section != ADDITIONS for n in dn.env_names(c)}
    reads = dn.env_reads()
    missing = sorted(f"{n} (read at {', '.join(reads[n][:2])})" for n in reads if n not in named)
    assert missing == []


def test_the_scan_finds_reads_of_every_kind():
    """Each way the code reads the environment is seen (else the test above would pass on nothing)."""
    reads = dn.env_reads()
    assert "WARM_IP_TARGET" in reads  # a helper handed the mapping: _int(env, "WARM_IP_TARGET", 0)
    assert "WARMPOOL_CLUSTER" in reads  # env.get(names.ENV_CLUSTER), through an import
    assert "WARMPOOL_LEASE_TTL_S" in reads  # a pydantic-settings field alias
    assert "CNI_COMMAND" in reads  # the plugin's own helper: _env(environ, "CNI_COMMAND")
    assert "WARMPOOL_DEMO_LOCK_WAIT_S" in reads  # os.environ.get(...)
    assert "CDK_DEFAULT_ACCOUNT" in reads
    # a WSGI request's, not the process's
    assert not {"PATH_INFO", "QUERY_STRING", "REMOTE_ADDR", "HTTP_X_AMZ_TARGET"} & set(reads)


def test_names_py_is_not_claimed_to_hold_every_variable():
    """Many variables are defined where they are read (node_agent/config.py, functions/settings.py)."""
    claims = [
        f"{d.name}: {line.strip()}"
        for d in _docs()
        for _, text in d.sections
        for line in text.splitlines()
        if re.search(r"(every|all)\b[^.]*\b(environment|env)[^.]*names\.py", line, re.I)
    ]
    assert claims == []


# --- metrics ---------------------------------------------------------------------------------------

_COUNTED = re.compile(r"\bcount(?:ed|s|ing)?\b[\s(]*`([A-Z][A-Za-z0-9]+)`")


def _table_names(doc: str, heading: str) -> list[str]:
    """The code spans of the first column of the tables under ``heading``: the names a table lists."""
    text = dict(dn.parse(dn.ROOT / doc).sections)[heading]
    return [
        n for line in text.splitlines() if line.startswith("|") for n in re.findall(r"`([^`]+)`", line.split("|")[1])
    ]


def test_every_metric_the_docs_name_is_emitted():
    emitted = set(dn.emitted_metrics())
    declared = set(dn.metric_constants().values())
    problems = []
    for d in _docs():
        for c in d.code:
            if c.text in declared and c.text not in emitted and c.text not in DECLARED_NOT_EMITTED:
                problems.append(f"{d.name}: `{c.text}` is declared in warmpool/names.py but nothing emits it")
        for _, text in d.sections:  # "counted `X`": X must be a metric the code emits
            problems += [
                f"{d.name}: counted `{m}`, which no code emits"
                for m in _COUNTED.findall(text)
                if m not in emitted and m not in DECLARED_NOT_EMITTED
            ]
    for name in _table_names("docs/allocator.md", "Metrics"):
        if name not in emitted:
            problems.append(f"docs/allocator.md, Metrics: `{name}` is not emitted")
    prometheus = dn.agent_metrics()
    for c in _code():
        problems += [
            f"{c.doc}: `{m}` is not one of the agent's metrics"
            for m in re.findall(r"\b(warmpool_[a-z0-9_]+)\b", c.text)
            if m not in prometheus and not m.startswith("warmpool_cli")
        ]
    assert problems == []


_COUNTED_IN_CODE = re.compile(r"\bcount(?:ed|s|ing)?\b[\s(]*``([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)``")


def test_every_metric_a_docstring_or_comment_says_is_counted_is_emitted():
    """The code's own prose too: "counts ``X``" names a metric that exists."""
    emitted = set(dn.emitted_metrics())
    wrong = []
    for top in dn.PACKAGES:
        for path in sorted((dn.ROOT / top).rglob("*.py")):
            for i, line in enumerate(path.read_text().splitlines(), 1):
                wrong += [
                    f"{path.relative_to(dn.ROOT)}:{i}: ``{m}``"
                    for m in _COUNTED_IN_CODE.findall(line)
                    if m not in emitted and m not in DECLARED_NOT_EMITTED
                ]
    assert wrong == []


def test_every_metric_the_code_emits_is_listed():
    listed = {c.text for doc in ("docs/allocator.md", "docs/agent.md") for c in dn.parse(dn.ROOT / doc).code}
    emitted = dn.emitted_metrics()
    missing = sorted(f"{m} (emitted at {emitted[m][0]})" for m in emitted if m not in listed)
    missing += sorted(m for m in dn.agent_metrics() if not any(m in t for t in listed))
    assert missing == []


def test_the_metric_scan_finds_what_the_functions_and_the_agent_emit():
    emitted = dn.emitted_metrics()
    assert {"ReportsReceived", "EC2Calls", "NodesAtPodCeiling", "FlipHistoriesUnshared"} <= set(emitted)
    assert set(emitted) <= set(dn.metric_constants().values())
    assert set(dn.metric_constants().values()) - set(emitted) == set(DECLARED_NOT_EMITTED)
    assert {"warmpool_addresses_total", "warmpool_cni_failures_total"} <= dn.agent_metrics()


# --- the layering ----------------------------------------------------------------------------------

MAY_IMPORT = {
    "warmpool": set(),
    "functions": {"warmpool"},
    "node_agent": {"warmpool"},
    "infra": {"warmpool", "functions.identity"},
    "emulated": {"warmpool", "functions", "node_agent", "infra"},
    "bench": {"warmpool", "functions", "node_agent", "emulated"},
    "simulation": {"warmpool", "functions", "node_agent", "emulated"},
    "demo": {"warmpool", "functions", "node_agent", "emulated", "infra"},
    "warmpool_cli": {"warmpool"},
}
"""docs/design.md's "Layout and layering" table, "may import" column (the project's packages only)."""


def test_every_import_follows_the_layering_design_states():
    """Every import statement of a package, inside functions and under ``TYPE_CHECKING`` too.
    ``warmpool_cli`` loads the other subcommands by module name, which is no import statement."""
    assert set(MAY_IMPORT) == set(dn.PACKAGES)
    wrong = []
    for mod in dn.modules(dn.ALL_CODE).values():
        own = mod.name.split(".")[0]
        if own not in MAY_IMPORT:
            continue
        for target, line in dn.imported_modules(mod):
            top = target.split(".")[0]
            if top == own or top not in MAY_IMPORT:
                continue
            if not any(target == a or target.startswith(a + ".") for a in MAY_IMPORT[own]):
                wrong.append(f"{mod.path.relative_to(dn.ROOT)}:{line}: {own} imports {target}")
    assert wrong == []


# --- links and paths ---------------------------------------------------------------------------------


def test_every_relative_link_resolves():
    broken = []
    for d in _docs():
        for target in dn.links(d):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (d.path.parent / path).resolve() if path else d.path
            if not dest.exists() or dn.ROOT not in dest.parents:
                broken.append(f"{d.name}: ({target}) is not a file of the repository")
            elif anchor and dest.suffix == ".md" and anchor not in {dn.slug(h) for h in dn.parse(dest).headings()}:
                broken.append(f"{d.name}: ({target}) names no heading of {dest.name}")
    assert broken == []


def test_every_repository_path_the_docs_name_exists():
    missing = sorted(
        {f"{c.doc}: {p}" for c in _code() if (p := dn.repo_path(c)) is not None and not (dn.ROOT / p).exists()}
    )
    assert missing == []


def test_every_dotted_name_the_docs_name_resolves():
    """``emulated.local.LocalStack``, ``warmpool.planner.plan_node``: a module of the project, and a name it defines."""
    wrong = sorted({f"{c.doc}: {n}" for c in _code() for n in dn.dotted_names(c) if not dn.resolves(n)})
    assert wrong == []


def test_nothing_points_outside_the_repository():
    """The contract is docs/design.md; no doc, comment or docstring sends a reader to a file the repository lacks."""
    pattern = re.compile(r"\.\./shared|/work/shared|\bDESIGN\.md|\bREFERENCE\.md")
    files = [
        *dn.doc_files(),
        *(p for top in dn.ALL_CODE for p in (dn.ROOT / top).rglob("*.py") if p.name != "test_docs_in_step.py"),
        *(dn.ROOT / "infra" / "k8s").glob("*.yaml"),
        *(dn.ROOT / "scenarios").glob("*.yaml"),
    ]
    hits = [
        f"{path.relative_to(dn.ROOT)}:{i}"
        for path in files
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []
