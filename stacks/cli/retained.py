"""``python -m stacks destroy-report --stack NAME``: what ``pulumi destroy`` of a committed stack keeps, why, and how
to delete or re-adopt each (stacks.program.retained_report). The program does not run on ``pulumi destroy``, so read
this before (or after) destroying; it reads the stack file only."""
from __future__ import annotations


def add_subparser(sub) -> None:
    p = sub.add_parser("destroy-report", help="what `pulumi destroy` of a stack keeps, why, and how to delete it",
                       description="What `pulumi destroy` of a committed stack keeps (namespace, model-cache claim, "
                                   "file system), why, and how to delete or re-adopt each. Reads the stack file only.")
    p.add_argument("--stack", required=True, metavar="NAME", help="a committed stack: Pulumi.NAME.yaml in the repository")
    p.set_defaults(fn=run)


def run(args) -> int:
    from ..retained import retained_report
    from ..render import program_for_stack

    print(retained_report(program_for_stack(args.stack)))
    return 0
