"""``python -m stacks``: the catalog and the serving render for people and CI."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import catalog
from .config import ConfigError


def cmd_targets(args) -> int:
    for t in sorted(catalog.targets().values(), key=lambda t: t.id):
        print(f"{t.id}\t{t.upstream or '-'}")
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
    else:
        objs = render_target(args.target)
    text = to_yaml(objs)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_fidelity(args) -> int:
    from . import fidelity
    from .render import render_target

    ref = fidelity.recipes_dir()
    by_upstream = {t.upstream: t for t in catalog.targets().values() if t.upstream}
    bad = 0
    scope = fidelity.in_scope_files(ref)
    for path in scope:
        t = by_upstream.get(path)
        if args.target and (not t or t.id != args.target):
            continue
        if not t:
            print(f"MISSING target for {path}")
            bad += 1
            continue
        diffs = fidelity.compare_file(fidelity.load_docs(ref / path), render_target(t.id), storage_class=None, pull_secrets=())
        if diffs:
            bad += 1
            print(f"DIFF {path} ({t.id}): {len(diffs)}")
            for d in diffs[: None if args.verbose else 5]:
                print("   ", d)
    cache_bad, cache_total = 0, 0
    for model, diffs in fidelity.compare_model_cache(ref, render_target).items():
        for path, lines in diffs.items():
            cache_total += 1
            if lines:
                cache_bad += 1
                print(f"DIFF {path}: {len(lines)}")
                for d in lines[: None if args.verbose else 5]:
                    print("   ", d)
    print(f"fidelity: {len(scope) - bad}/{len(scope)} upstream files exact; {cache_total - cache_bad}/{cache_total} model-cache files exact")
    return 1 if bad or cache_bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m stacks")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("targets", help="one line per catalog target: ID<TAB>UPSTREAM").set_defaults(fn=cmd_targets)
    r = sub.add_parser("render", help="print the Kubernetes objects a target or stack creates")
    g = r.add_mutually_exclusive_group(required=True)
    g.add_argument("--target")
    g.add_argument("--all", action="store_true")
    g.add_argument("--stack")
    r.add_argument("--out")
    r.set_defaults(fn=cmd_render)
    f = sub.add_parser("fidelity", help="compare every target with the upstream recipe files")
    f.add_argument("--target")
    f.add_argument("-v", "--verbose", action="store_true")
    f.set_defaults(fn=cmd_fidelity)
    from .preflight import add_subparser as add_preflight

    add_preflight(sub)
    from .review import add_subparsers as add_review

    add_review(sub)
    from .simulate import add_subparser as add_simulate

    add_simulate(sub)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
