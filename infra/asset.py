"""The Lambda code asset, staged in Python: no Docker, no network.

The functions are pure Python: the repo's ``warmpool/`` and ``functions/`` packages
plus the few pure-Python distributions the Powertools layer lacks, copied from the
environment running synth. Powertools and pydantic come from the public layer, and so
does ``cryptography`` (``functions/identity.py``): the v3 layer is built per Python
version and architecture and ships the AWS Encryption SDK with its ``cryptography``
(powertools-lambda-python PR #4630), so no native wheel is copied from this machine.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import shutil
import tempfile
import warnings
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("warmpool", "functions")
# Needed by the functions' settings and not shipped in the Powertools layer.
VENDORED_DISTRIBUTIONS = ("pydantic-settings", "python-dotenv")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".mypy_cache", "tests")


def _copy_distribution(name: str, dest: Path) -> bool:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    for file in dist.files or ():
        parts = file.parts
        if not parts or parts[0] == ".." or parts[0].endswith(".dist-info") or file.suffix == ".pyc":
            continue
        target = dest / file
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(str(file.locate())), target)
    return True


def stage_lambda_code(repo_root: Path = REPO_ROOT) -> Path:
    """Return a fresh directory holding everything the functions import beyond the layer."""
    staging = Path(tempfile.mkdtemp(prefix="warmpool-lambda-"))
    atexit.register(shutil.rmtree, staging, True)
    for package in PACKAGES:
        source = repo_root / package
        if not (source / "__init__.py").is_file():
            raise FileNotFoundError(f"Lambda asset: package {source} is missing")
        shutil.copytree(source, staging / package, ignore=_IGNORE)
    for name in VENDORED_DISTRIBUTIONS:
        if not _copy_distribution(name, staging):
            warnings.warn(
                f"Lambda asset: {name} is not installed here, so it is not bundled "
                "(pip install -e '.[functions]' before deploying)",
                stacklevel=2,
            )
    return staging


AGENT_DOCKERFILE = "infra/docker/agent.Dockerfile"
AGENT_IMAGE_FILES = ("pyproject.toml", "README.md")
AGENT_IMAGE_DIRS = ("warmpool", "node_agent", "infra/docker")


def stage_agent_image_context(repo_root: Path = REPO_ROOT) -> Path:
    """A fresh build context holding exactly what ``infra/docker/agent.Dockerfile`` copies
    (the CDK image asset's directory: nothing else of the checkout is hashed or uploaded)."""
    staging = Path(tempfile.mkdtemp(prefix="warmpool-agent-image-"))
    atexit.register(shutil.rmtree, staging, True)
    for name in AGENT_IMAGE_FILES:
        shutil.copyfile(repo_root / name, staging / name)
    for name in AGENT_IMAGE_DIRS:
        shutil.copytree(repo_root / name, staging / name, ignore=_IGNORE)
    return staging
