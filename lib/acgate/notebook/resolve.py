"""A notebook's parameters: the domain's params file (``params/<domain>.yaml``, or another) with an
optional overlay, read from the project root.
"""

from __future__ import annotations

from pathlib import Path

from acgate.config import Params, load_params
from acgate.layout import project_root


def resolve(domain: str, params_file: str = "", profile_file: str = "") -> tuple[Params, Path]:
    """Load ``params/<domain>.yaml`` (or ``params_file``) with an optional overlay; paths relative to the root
    (``~`` is the home folder)."""
    root = project_root()
    path = root / Path(params_file or f"params/{domain}.yaml").expanduser()
    params = load_params(path, root / Path(profile_file).expanduser() if profile_file else None)
    if params.domain != domain:
        raise ValueError(f"{path} is for domain '{params.domain}', but the notebook was asked for '{domain}'")
    return params, root
