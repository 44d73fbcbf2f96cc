"""``dynamo-stacks render`` (the Kubernetes objects a target or a committed stack creates, as YAML) and
``dynamo-stacks fidelity`` (every target against the upstream recipe files it follows)."""

from __future__ import annotations

import sys

from stacks import catalog
from stacks.config.keys import ConfigError
from stacks.cli.shell import CliError, output_path


def cmd_render(args) -> int:
    from stacks.serving import render_target
    from stacks.registry.yaml_text import to_yaml

    if args.all:
        if not args.out:
            raise CliError("render --all writes one file per target: it needs --out DIR")
        args.out.mkdir(exist_ok=True)
        for tid in sorted(catalog.targets()):
            (args.out / f"{tid}.yaml").write_text(to_yaml(render_target(tid)))
        print(f"wrote {len(catalog.targets())} targets to {args.out}", file=sys.stderr)
        return 0
    if args.stack:
        from stacks.config.keys import deprecation_warnings
        from stacks.program.render import program_for_stack, skipped_checks

        program = program_for_stack(args.stack)
        objs = program.objects()
        # the layers in the one layer shape: their objects are below, their charts in the note
        shown = [layer.title for layer in program.layers if layer.objects]
        others = [x for x in program.other_layers if not any(x.startswith(layer.title) for layer in program.layers)]
        charts = [f"{c.chart} {c.version}" for layer in program.layers for c in layer.charts]
        if others or charts:
            what = "serving layer" + "".join(f" and {t}" for t in shown) + (" objects" if shown else " only")
            also = others + ([f"the Helm charts {', '.join(charts)}"] if charts else [])
            print(
                f"note: {what}; `pulumi up --stack {args.stack}` also creates: {', '.join(also)} "
                f"(see `pulumi preview --stack {args.stack}`)",
                file=sys.stderr,
            )
        for note in skipped_checks(args.stack, program):
            print(f"note: not checked by render (met at `pulumi up`): {note}", file=sys.stderr)
        for e in program.entries or ():
            for w in deprecation_warnings(e.cfg):
                print(f"warning: {w}", file=sys.stderr)  # what `pulumi up` warns about this stack's target
    else:
        target, warning = catalog.resolve(args.target)
        if target is None:
            raise ConfigError(unknown_target(args.target))
        objs = render_target(args.target)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    text = to_yaml(objs)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_fidelity(args) -> int:
    """Exit 0 only when every compared upstream file and model-cache object is exact; 1 on a difference, a target
    whose upstream file is missing or an upstream file without a target; 2 when there is no upstream tree."""
    from stacks.cli import fidelity
    from stacks.program.render import render_config, render_target

    if args.target and args.target not in catalog.targets():
        raise ConfigError(unknown_target(args.target))
    # Each target is compared with the reference snapshot it follows (Target.reference); every snapshot some
    # target follows must be there.
    snapshots = (
        [catalog.targets()[args.target].reference]
        if args.target
        else [s for s in fidelity.SNAPSHOTS if any(t.reference == s for t in catalog.targets().values())]
    )
    try:
        pinned = lambda tid: render_config({"target": tid, "modelRevision": fidelity.PROBE_REVISION})  # noqa: E731
        reports = [fidelity.check(render_target, only=args.target, snapshot=s, render_pinned=pinned) for s in snapshots]
    except fidelity.ReferenceMissing as e:
        raise CliError(f"fidelity: {e}") from None
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
    for name, diffs in report.pinned_different.items():
        print(f"DIFF {name} with dynamo:modelRevision: {len(diffs)}")
        for d in diffs[:shown]:
            print("   ", d)
    if report.departures():
        print(report.departures())
    print(report.summary())  # last: what a script tailing the output reads


def unknown_target(tid: str) -> str:
    from stacks.registry import did_you_mean

    return f"--target: {tid!r} is not a catalog target{did_you_mean(tid, catalog.targets())} (list them: dynamo-stacks targets)"


def add_subparsers(sub) -> None:
    r = sub.add_parser(
        "render",
        help="print the Kubernetes objects a target or a committed stack creates (YAML)",
        description="Print, as YAML, the Kubernetes objects the serving layer of a catalog target or of "
        "a committed stack (Pulumi.<stack>.yaml) creates; no cluster or cloud account needed.",
    )
    g = r.add_mutually_exclusive_group(required=True)
    g.add_argument("--target", metavar="ID", help="a catalog target id (list them: dynamo-stacks targets)")
    g.add_argument("--stack", metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    g.add_argument("--all", action="store_true", help="every catalog target, one ID.yaml each in --out DIR")
    r.add_argument(
        "--out",
        metavar="PATH",
        type=output_path,
        help="write to this file (a directory with --all) instead of stdout; its parent must exist",
    )
    r.set_defaults(fn=cmd_render)
    f = sub.add_parser(
        "fidelity",
        help="compare every target with the upstream recipe files it follows",
        description="Compare every catalog target's rendered objects with the upstream Dynamo recipe "
        "files it follows (../shared/reference). Exit 0 when all are exact, 1 on any "
        "difference, 2 when the upstream files are missing.",
    )
    f.add_argument("--target", metavar="ID", help="compare only this target (and the model-cache objects it renders)")
    f.add_argument("-v", "--verbose", action="store_true", help="list every differing field, not the first five")
    f.set_defaults(fn=cmd_fidelity)
