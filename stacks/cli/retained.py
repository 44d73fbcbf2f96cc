"""``python -m stacks destroy-report --stack NAME``: what ``pulumi destroy`` of a committed stack keeps, why, and how
to delete or re-adopt each (stacks.program.retained.retained_report), from the stack file only, before or after a destroy.
``pulumi destroy --run-program`` prints the same for each kept Kubernetes object as it drops it (the program's
after_delete hooks, components/serving.py); this report also names what an EKS cluster layer keeps."""

from __future__ import annotations


def add_subparser(sub) -> None:
    p = sub.add_parser(
        "destroy-report",
        help="what `pulumi destroy` of a stack keeps, why, and how to delete it",
        description="What `pulumi destroy` of a committed stack keeps (namespace, model-cache claim, "
        "file system), why, and how to delete or re-adopt each. Reads the stack file only.",
    )
    p.add_argument("--stack", required=True, metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    p.set_defaults(fn=run)


def run(args) -> int:
    from stacks.program.retained import retained_report
    from stacks.program.render import program_for_stack

    print(retained_report(program_for_stack(args.stack)))
    return 0
