"""CDK app entry point (``cdk.json``: ``python -m infra.app``).

Reads the stack's settings from CDK context, validates them and builds one
cluster's stack. cdk-nag's AwsSolutions pack runs on every synth.
"""

from __future__ import annotations

import os
import sys

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.config import CONTEXT_KEYS, StackConfig, StackConfigError, config_from_context
from infra.stack import WarmpoolStack


def build(app: App, config: StackConfig) -> WarmpoolStack:
    env = None
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    if account and region:
        env = Environment(account=account, region=region)
    stack = WarmpoolStack(
        app,
        config.resolved_stack_name,
        config=config,
        env=env,
        description=f"warmpool allocator for Kubernetes cluster {config.cluster}",
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


def main() -> None:
    app = App()
    try:
        config = config_from_context({key: app.node.try_get_context(key) for key in CONTEXT_KEYS})
    except StackConfigError as err:
        print(err, file=sys.stderr)
        sys.exit(2)
    build(app, config)
    app.synth()


if __name__ == "__main__":
    main()
