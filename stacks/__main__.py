"""``python -m stacks``: the catalog and the serving render for people and CI."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import catalog
from .config import ConfigError


def cmd_targets(args) -> int:
    """Default: ``ID<TAB>UPSTREAM`` per line (scripts and the fidelity hook read it); ``--long``: a table with
    model, GPU, topology, GPUs and nodes needed, instance type and published perf; ``--json``: the same as data."""
    ts = sorted(catalog.targets().values(), key=lambda t: t.id)
    if not (args.long or args.json):
        for t in ts:
            print(f"{t.id}\t{t.upstream or '-'}")
        return 0
    from .catalog import view

    rows = [view.row(t) for t in ts]
    if args.json:
        import json

        print(json.dumps(rows, indent=2))
    else:
        sys.stdout.write(view.table(rows))
    return 0


def cmd_render(args) -> int:
    from .render import render_target, to_yaml

    if args.all:
        if not args.out:
            print("render --all needs --out DIR", file=sys.stderr)
            return 2
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for tid in sorted(catalog.targets()):
            (out / f"{tid}.yaml").write_text(to_yaml(render_target(tid)))
        print(f"wrote {len(catalog.targets())} targets to {out}", file=sys.stderr)
        return 0
    if args.stack:
        from .render import program_for_stack

        program = program_for_stack(args.stack)
        objs = program.objects()
        if program.other_layers:
            print(f"note: serving layer only; `pulumi up --stack {args.stack}` also creates: {', '.join(program.other_layers)} "
                  f"(see `pulumi preview --stack {args.stack}`)", file=sys.stderr)
        from .render import skipped_checks

        for note in skipped_checks(args.stack, program):
            print(f"note: not checked by render (met at `pulumi up`): {note}", file=sys.stderr)
        from .config import deprecation_warnings

        for e in program.entries or ():
            for w in deprecation_warnings(e.cfg):
                print(f"warning: {w}", file=sys.stderr)  # what `pulumi up` warns about this stack's target
    else:
        objs = render_target(args.target)
        warning = catalog.resolve(args.target)[1]
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    text = to_yaml(objs)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_fidelity(args) -> int:
    """Exit 0 only when every compared upstream file and model-cache object is exact; 1 on a difference, a target
    whose upstream file is missing or an upstream file without a target; 2 when there is no upstream tree."""
    from . import fidelity
    from .render import render_target

    if args.target and args.target not in catalog.targets():
        raise ConfigError(_unknown_target(args.target))
    # Each target is compared with the reference snapshot it follows (Target.reference); every snapshot some
    # target follows must be there.
    snapshots = [catalog.targets()[args.target].reference] if args.target else \
        [s for s in fidelity.SNAPSHOTS if any(t.reference == s for t in catalog.targets().values())]
    try:
        reports = [fidelity.check(render_target, only=args.target, snapshot=s) for s in snapshots]
    except fidelity.ReferenceMissing as e:
        print(f"error: fidelity: {e}", file=sys.stderr)
        return 2
    for report in reports:
        _print_fidelity(report, args.verbose)
    return 0 if all(r.ok for r in reports) else 1


def _print_fidelity(report, verbose: bool) -> None:
    shown = None if verbose else 5
    for path in report.no_target:
        print(f"MISSING target for {path}")
    for tid, path in report.no_upstream:
        print(f"MISSING upstream file {path} for target {tid}")
    for path, (tid, diffs) in report.different.items():
        print(f"DIFF {path} ({tid}): {len(diffs)}")
        for d in diffs[:shown]:
            print("   ", d)
    for name, diffs in report.cache_different.items():
        print(f"DIFF {name}: {len(diffs)}")
        for d in diffs[:shown]:
            print("   ", d)
    print(report.summary())


def _unknown_target(tid: str) -> str:
    from .registry import did_you_mean

    return f"--target: {tid!r} is not a catalog target{did_you_mean(tid, catalog.targets())} (see `python -m stacks targets`)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m stacks")
    sub = p.add_subparsers(dest="cmd", required=True)
    tp = sub.add_parser("targets", help="one line per catalog target: ID<TAB>UPSTREAM (--long: a table, --json: data)")
    tg = tp.add_mutually_exclusive_group()
    tg.add_argument("-l", "--long", action="store_true", help="model, GPU, topology, GPUs and nodes needed, instance type, published perf")
    tg.add_argument("--json", action="store_true", help="every target with those columns as JSON")
    tp.set_defaults(fn=cmd_targets)
    r = sub.add_parser("render", help="print the Kubernetes objects a target or stack creates")
    g = r.add_mutually_exclusive_group(required=True)
    g.add_argument("--target")
    g.add_argument("--all", action="store_true")
    g.add_argument("--stack")
    r.add_argument("--out")
    r.set_defaults(fn=cmd_render)
    f = sub.add_parser("fidelity", help="compare every target with the upstream recipe files (exit 1 on any difference, 2 without them)")
    f.add_argument("--target", help="compare only this target (and the model-cache objects it renders)")
    f.add_argument("-v", "--verbose", action="store_true")
    f.set_defaults(fn=cmd_fidelity)
    from .cli.preflight import add_subparser as add_preflight

    add_preflight(sub)
    from .cli.review import add_subparsers as add_review

    add_review(sub)
    from .cli.simulate import add_subparser as add_simulate

    add_simulate(sub)
    from .cli.bench_report import add_subparser as add_bench_report; add_bench_report(sub)  # noqa: E702
    from .cli.timeline import add_subparser as add_timeline; add_timeline(sub)  # noqa: E702
    from .cli.drift import add_subparser as add_drift

    add_drift(sub)
    from .cli.cost import add_subparser as add_cost

    add_cost(sub)
    from .cli.retained import add_subparser as add_destroy_report; add_destroy_report(sub)  # noqa: E702
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
