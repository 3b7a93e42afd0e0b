"""``warmpool local up``'s options reach the functions' environment as the stack's do
(infra/stack.py): a setting the allocator derives a safety margin from must be the one
the functions run with."""

from __future__ import annotations

from emulated.local import LocalStack
from functions.settings import LEASE_TTL_MARGIN_S, Settings
from warmpool import names


def test_local_up_allocate_timeout_reaches_the_lease_ttl() -> None:
    # Before: the functions never saw --allocate-timeout, so the lease TTL was derived from
    # the default 30 s while invocations ran up to 90 s: a second invocation could take the
    # lease of an instance the first was still acting on.
    with LocalStack(cluster="lto", allocate_timeout_s=90, run_functions=False, set_process_env=False) as stack:
        env = stack.function_env()
        assert env[names.ENV_ALLOCATE_TIMEOUT_S] == "90"
        settings = Settings.model_validate(env)
        assert settings.allocate_timeout_s == 90
        assert settings.lease_ttl_s == 90 + LEASE_TTL_MARGIN_S
