"""Helpers the notebooks share: finding the project root and resolving a domain's params file."""

from __future__ import annotations

import os
from pathlib import Path

from acgate.config import Params, load_params


def project_root(start: Path | None = None) -> Path:
    """The project root: ``$ACGATE_ROOT`` when set, else the nearest folder at or above ``start`` (default:
    the working directory) holding ``params/`` and ``pyproject.toml``, so notebooks run from the root or
    from ``notebooks/`` alike."""
    if os.environ.get("ACGATE_ROOT"):
        return Path(os.environ["ACGATE_ROOT"]).resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params").is_dir() and (folder / "pyproject.toml").is_file():
            return folder
    raise FileNotFoundError(f"no project root (a folder with params/ and pyproject.toml) at or above {here}")


def resolve(domain: str, params_file: str = "", profile_file: str = "") -> tuple[Params, Path]:
    """Load ``params/<domain>.yaml`` (or ``params_file``) with an optional overlay; paths relative to the root."""
    root = project_root()
    path = root / (params_file or f"params/{domain}.yaml")
    params = load_params(path, root / profile_file if profile_file else None)
    if params.domain != domain:
        raise ValueError(f"{path} is for domain '{params.domain}', but the notebook was asked for '{domain}'")
    return params, root
