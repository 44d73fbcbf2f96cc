"""Dynamo policy pack.

python policy/stack_config.py h100-disagg > /tmp/policy-config.json
pulumi preview --stack h100-disagg --policy-pack policy --policy-pack-config /tmp/policy-config.json
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policies import POLICIES  # noqa: E402

PolicyPack(name="dynamo-serving", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
