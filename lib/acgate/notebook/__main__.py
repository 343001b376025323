"""Running the notebooks from the command line; every rule of the workflow (``workflow/Snakefile``)
runs one of these.

    python -m acgate.notebook run notebooks/03_train.py runs/synthetic_linear/seed00/03_train.ipynb \\
        domain=synthetic_linear seed=0 'methods=[acgate, tft]'
    python -m acgate.notebook run notebooks/03_train.py 'runs/synthetic_linear/seed{seed:02d}/03_train.ipynb' \\
        domain=synthetic_linear --seeds 0 1 2 3
    python -m acgate.notebook html runs/html/index.html runs/*/seed*/03_train.ipynb ... --jobs 2

``run`` executes one notebook (:mod:`acgate.notebook.execution`; values are parsed as YAML); with ``--seeds``, once
per seed, each into its own executed copy and log, in one kernel. ``html`` writes the HTML view
(:mod:`acgate.notebook.html_view`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from acgate.config import read_settings
from acgate.notebook.execution import execute_notebooks
from acgate.notebook.html_view import html_view, without_iri_grammar


def _parameter(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, read_settings(value) if value else ""
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", err)
        raise argparse.ArgumentTypeError(f"parameter {key}: {value!r} is not valid YAML ({problem}); a list is "
                                         "written like 'methods=[acgate, tft]'") from None


def main(argv: list[str] | None = None) -> None:
    without_iri_grammar()
    parser = argparse.ArgumentParser(prog="python -m acgate.notebook", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute one notebook with Papermill")
    run.add_argument("notebook", type=Path, help="percent-format notebook, e.g. notebooks/03_train.py")
    run.add_argument("output", help="where the executed .ipynb goes; with --seeds, a pattern with {seed} "
                     "(e.g. runs/synthetic_linear/seed{seed:02d}/03_train.ipynb)")
    run.add_argument("parameters", nargs="*", type=_parameter, help="notebook parameters as key=value (YAML)")
    run.add_argument("--seeds", nargs="+", type=int, metavar="SEED",
                     help="run the notebook once per seed (parameter seed=SEED), in turn, in one kernel")
    view = sub.add_parser("html", help="HTML pages of executed notebooks and an index page")
    view.add_argument("index", type=Path, help="the index page, e.g. runs/html/index.html")
    view.add_argument("notebooks", nargs="+", type=Path, help="executed .ipynb files")
    view.add_argument("--jobs", type=int, default=1, help="processes converting pages (default 1)")
    args = parser.parse_args(argv)
    if args.command == "html":
        try:
            written = html_view(args.index, args.notebooks, args.jobs)
        except OSError as err:  # to the terminal: the workflow's log of this step may be what cannot be written
            raise SystemExit(f"the HTML view {args.index} failed: {err}\n  the executed notebooks are complete: fix "
                             "what it names (a full disk: make room) and rerun, which makes only the view "
                             "again") from None
        print(f"{args.index}: {len(args.notebooks)} notebooks, {len(written)} pages written", flush=True)
        return
    parameters = dict(args.parameters)
    if args.seeds is None:
        runs = [(Path(args.output), parameters)]
    elif "{seed" not in args.output or "seed" in parameters:
        parser.error(f"with --seeds, the output must be a pattern with {{seed}} (got {args.output!r}) and seed=... "
                     "must not be given as a parameter")
    else:
        runs = [(Path(args.output.format(seed=seed)), {**parameters, "seed": seed}) for seed in args.seeds]
    try:
        seconds = execute_notebooks(args.notebook, runs)
    except RuntimeError as err:
        raise SystemExit(str(err)) from None
    for (output, _), took in zip(runs, seconds, strict=False):
        print(f"{output} ({took:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
