"""Render the DaemonSet manifests from a deployed stack's outputs: the one step between
``cdk deploy`` and ``kubectl apply``.

    npx cdk deploy -c cluster=prod ... --outputs-file cdk-outputs.json
    .venv/bin/python -m infra.render_manifests --outputs cdk-outputs.json \\
        --image 123456789012.dkr.ecr.eu-west-1.amazonaws.com/warmpool-agent:0.1.0
    kubectl apply -f k8s/rendered/warmpool.yaml

``--outputs`` takes any of: the ``cdk deploy --outputs-file`` JSON, the JSON of
``aws cloudformation describe-stacks --stack-name warmpool-<cluster>``, or the JSON
line ``warmpool local up`` prints (snake_case keys).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from infra import manifests
from infra.manifests import IRSA_ANNOTATION, K8S_DIR, TEMPLATES
from infra.outputs import OUTPUTS

__all__ = ["IRSA_ANNOTATION", "K8S_DIR", "TEMPLATES", "load_outputs", "render", "values_from_outputs"]
DEFAULT_OUT = K8S_DIR / "rendered"
REQUIRED = ("cluster", "region", "reports_queue_url", "result_queue_prefix")


class RenderError(ValueError):
    pass


def _from_cfn_keys(values: dict[str, Any]) -> dict[str, str]:
    by_output_id = {output_id: key for key, output_id in OUTPUTS.items()}
    return {by_output_id[k]: str(v) for k, v in values.items() if k in by_output_id}


def load_outputs(data: Any, stack: str | None = None) -> dict[str, str]:
    """Normalise any supported outputs document to ``{snake_case_key: value}``."""
    if isinstance(data, dict) and "Stacks" in data:  # describe-stacks
        stacks = {
            s["StackName"]: {o["OutputKey"]: o["OutputValue"] for o in s.get("Outputs", [])} for s in data["Stacks"]
        }
        data = stacks
    if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):  # per stack
        if stack is None:
            candidates = [name for name, outs in data.items() if "ReportsQueueUrl" in outs]
            if not candidates and len(data) == 1:  # one stack: its missing keys are the error, not the pick
                candidates = list(data)
            if len(candidates) != 1:
                raise RenderError(f"pick a stack with --stack (found: {', '.join(sorted(data)) or 'none'})")
            stack = candidates[0]
        if stack not in data:
            raise RenderError(f"stack {stack!r} not in the outputs (found: {', '.join(sorted(data))})")
        return _from_cfn_keys(data[stack])
    if isinstance(data, dict):
        if any(k in data for k in OUTPUTS.values()):
            return _from_cfn_keys(data)
        return {k: str(v) for k, v in data.items() if k in OUTPUTS}
    raise RenderError("outputs: expected a JSON object")


def values_from_outputs(outputs: dict[str, str], *, image: str) -> dict[str, Any]:
    """The Helm chart's values (``charts/warmpool/values.yaml``) for these stack outputs."""
    missing = [k for k in REQUIRED if not outputs.get(k)]
    if missing:
        raise RenderError(f"outputs lack {', '.join(missing)}")
    match = re.fullmatch(r"([^\s@]+?)(?::([\w][\w.-]{0,127})|@(sha256:[0-9a-f]{64}))", image)
    if not match or "/" in (match.group(2) or ""):
        raise RenderError(f"--image {image!r}: give a pullable reference with a tag or digest")
    identity = outputs.get("agent_identity", "pod-identity")
    if identity == "irsa" and not outputs.get("agent_role_arn"):
        raise RenderError("agent_identity is irsa but the outputs lack agent_role_arn")
    return {
        "cluster": outputs["cluster"],
        "region": outputs["region"],
        "reportsQueueUrl": outputs["reports_queue_url"],
        "resultQueuePrefix": outputs["result_queue_prefix"],
        "agentNamespace": outputs.get("agent_namespace", "kube-system"),
        "agentServiceAccount": outputs.get("agent_service_account", "warmpool-agent"),
        "agentIdentity": identity,
        "agentRoleArn": outputs.get("agent_role_arn", ""),
        "image": {"repository": match.group(1), "tag": match.group(2) or "", "digest": match.group(3) or ""},
    }


def render(outputs: dict[str, str], *, image: str) -> list[dict[str, Any]]:
    try:
        return manifests.render(values_from_outputs(outputs, image=image))
    except manifests.ManifestError as err:
        raise RenderError(str(err)) from None


def write(documents: list[dict[str, Any]], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    combined = out_dir / "warmpool.yaml"
    combined.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return combined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outputs", required=True, type=Path, help="stack outputs JSON (see module doc)")
    parser.add_argument("--image", required=True, help="agent image reference, with tag or digest")
    parser.add_argument("--stack", help="stack name, when the outputs file holds several")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.outputs.read_text())
        path = write(render(load_outputs(data, args.stack), image=args.image), args.out_dir)
    except (OSError, json.JSONDecodeError, RenderError, KeyError, ValueError) as err:
        print(f"render_manifests: {err}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
