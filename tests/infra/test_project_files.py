"""The Lambda asset, the CDK entry point and the pinned CLI."""

from __future__ import annotations

import json
from pathlib import Path

from infra.asset import stage_lambda_code
from tests.helpers.cdk_synth import Synthesized
from warmpool import names

ROOT = Path(__file__).resolve().parents[2]


def test_asset_holds_the_packages_without_bytecode() -> None:
    staged = stage_lambda_code()
    assert (staged / "warmpool" / "names.py").is_file()
    assert (staged / "functions" / "__init__.py").is_file()
    assert not list(staged.rglob("__pycache__")) and not list(staged.rglob("*.pyc"))


def test_asset_vendors_settings_support_missing_from_the_layer() -> None:
    staged = stage_lambda_code()
    assert (staged / "pydantic_settings" / "__init__.py").is_file()
    assert (staged / "dotenv" / "__init__.py").is_file()
    assert not (staged / "pydantic").exists()  # pydantic comes from the Powertools layer


def test_synthesized_asset_matches_the_handlers(default: Synthesized) -> None:
    (asset,) = default.asset_dirs
    for handler in (names.ALLOCATE_HANDLER, names.RECONCILE_HANDLER):
        package = handler.split(".")[0]
        assert (asset / package / "__init__.py").is_file()


def test_cdk_json_runs_the_app_module() -> None:
    cdk = json.loads((ROOT / "cdk.json").read_text())
    assert cdk["app"].endswith("-m infra.app")


def test_cdk_cli_is_pinned_exactly() -> None:
    package = json.loads((ROOT / "package.json").read_text())
    version = package["devDependencies"]["aws-cdk"]
    assert version[0].isdigit() and version.count(".") == 2, "pin an exact version"
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == version
