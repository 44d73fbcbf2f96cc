"""The waits `pulumi up` performs (stacks/serving/waits.py, components/serving.py): which annotations and
resource options bound them, and what the messages say when a wait ends badly. The behaviour
against a real API server (a wait ends at its timeout) is in test_engine.py."""

from __future__ import annotations

import pytest

import harness
from harness import run_program
from stacks.serving import waits
from stacks.program.render import render_config

CANARY = "hf_CANARY_WAITS_31c2"
TARGET = "lightning-vllm-agg-h100-dspark"
BASE = {"target": TARGET, "cluster": {"mode": "render", "renderDir": "/tmp/dynamo-mock-render-waits"}}


def _objs(raw: dict) -> dict[str, dict]:
    return {o["kind"]: o for o in render_config(raw)}


def test_job_waits_for_finished_with_a_fixed_deadline_annotation():
    """The Job carries pulumi.com/waitFor (the provider's fixed-deadline path) plus its timeout."""
    job = _objs({"target": TARGET, "wait": {"jobTimeout": "3m"}})["Job"]
    ann = job["metadata"]["annotations"]
    assert ann[waits.WAIT_FOR] == waits.JOB_FINISHED
    assert ann[waits.TIMEOUT] == "180"
    assert waits.SKIP_AWAIT not in ann
    assert '@.type=="Complete"' in waits.JOB_FINISHED and '@.type=="Failed"' in waits.JOB_FINISHED


def test_dgd_waits_for_ready_with_its_timeout():
    dgd = _objs({"target": TARGET, "wait": {"dgdTimeout": "90s"}})["DynamoGraphDeployment"]
    assert dgd["metadata"]["annotations"] == {waits.WAIT_FOR: "condition=Ready", waits.TIMEOUT: "90"}


@pytest.mark.parametrize(
    "wait, job_waits, dgd_waits, pvc_waits",
    [
        ({}, True, True, True),
        ({"enabled": False}, False, False, False),
        ({"job": False}, False, True, True),
        ({"dgd": False}, True, False, True),
    ],
)
def test_switches_choose_which_waits_exist(wait, job_waits, dgd_waits, pvc_waits):
    from stacks.config.keys import parse
    from stacks.serving import build_plan

    plan = build_plan(parse({"target": TARGET, "wait": wait}))
    found = {k[0] for k in waits.waits_of(plan)}
    assert ("Job" in found, "DynamoGraphDeployment" in found, "PersistentVolumeClaim" in found) == (
        job_waits,
        dgd_waits,
        pvc_waits,
    )
    job = plan.jobs[0]["metadata"].get("annotations") or {}
    assert (job.get(waits.SKIP_AWAIT) == "true") == (not job_waits)
    assert (waits.WAIT_FOR in job) == job_waits


def test_waits_of_names_the_timeout_and_its_config_key():
    from stacks.config.keys import parse
    from stacks.serving import build_plan

    plan = build_plan(parse({"target": TARGET, "namespace": "team-a", "wait": {"jobTimeout": "3m", "dgdTimeout": "2h"}}))
    w = waits.waits_of(plan)
    job = next(v for k, v in w.items() if k[0] == "Job")
    dgd = next(v for k, v in w.items() if k[0] == "DynamoGraphDeployment")
    pvc = next(v for k, v in w.items() if k[0] == "PersistentVolumeClaim")
    assert (job.timeout_seconds, job.key, job.namespace) == (180, "dynamo:wait.jobTimeout", "team-a")
    assert (dgd.timeout_seconds, dgd.key) == (7200, "dynamo:wait.dgdTimeout")
    assert pvc.timeout_seconds == waits.PVC_TIMEOUT_SECONDS
    assert job.describe == f"kubectl describe job/{job.name} -n team-a"
    assert dgd.describe == f"kubectl describe dynamographdeployment/{dgd.name} -n team-a"
    assert job.announce() == (
        f"when it creates or updates Job team-a/{job.name}, `up` waits up to 3m (dynamo:wait.jobTimeout) "
        f"for it to finish (condition Complete or Failed); to look meanwhile: {job.describe}"
    )
    assert "up to 2h" in dgd.announce()


def test_custom_timeouts_follow_the_annotation():
    assert waits.custom_timeout({waits.TIMEOUT: "180"}) == "180s"
    assert waits.custom_timeout({waits.SKIP_AWAIT: "true"}) is None
    assert waits.custom_timeout({}) is None


PROVIDER_TIMEOUT = (
    'resource "urn:pulumi:s::p::dynamo:serving:Serving$kubernetes:batch/v1:Job::serving-model-download-x" '
    "was successfully created, but the Kubernetes API server reported that it failed to fully initialize "
    "or become live: timed out waiting for the condition"
)


def _job_wait(timeout=180):
    return waits.Wait(
        "Job", "model-download", "team-a", "to finish (condition Complete or Failed)", timeout, "dynamo:wait.jobTimeout"
    )


def test_timeout_message_says_what_was_awaited_what_was_seen_and_how_to_look():
    msg = _job_wait().failed([PROVIDER_TIMEOUT], seen="pods active 1, succeeded 0, failed 0; no conditions")
    assert msg.startswith(
        "gave up waiting for Job team-a/model-download to finish (condition Complete or Failed) "
        "after 3m (dynamo:wait.jobTimeout)."
    )
    assert "provider: timed out waiting for the condition" in msg and "urn:pulumi" not in msg
    assert "last seen: pods active 1, succeeded 0, failed 0; no conditions" in msg
    assert "look: kubectl describe job/model-download -n team-a" in msg
    assert "kubectl logs job/model-download -n team-a" in msg
    assert "next `pulumi up` waits for it again" in msg


def test_engine_multierror_framing_is_removed():
    framed = f"1 error occurred:\n\t* {PROVIDER_TIMEOUT}\n\n"
    msg = _job_wait().failed([framed])
    assert "provider: timed out waiting for the condition\n" in msg and "error occurred" not in msg


def test_message_without_a_probe_points_at_the_command():
    msg = _job_wait().failed([PROVIDER_TIMEOUT])
    assert "last seen: not available here; the command below shows it" in msg
    assert "kubectl describe job/model-download -n team-a" in msg


def test_pvc_timeout_text_of_the_legacy_poller_counts_as_a_timeout():
    w = waits.Wait("PersistentVolumeClaim", "shared-model-cache", "ns", "to be Bound", 300, "fixed")
    msg = w.failed(
        ["... failed to fully initialize or become live: Timeout occurred polling for 'shared-model-cache'"],
        seen="phase Pending, storage class gp3",
    )
    assert "after 5m" in msg and "kubectl describe pvc/shared-model-cache -n ns" in msg
    assert "phase Pending, storage class gp3" in msg
    assert msg.endswith("the next `pulumi up` waits for it again") and "raise fixed" not in msg


@pytest.mark.parametrize("reason", ["context canceled", 'Resource operation was cancelled for "model-download"'])
def test_a_cancelled_wait_says_so(reason):
    msg = _job_wait().failed([f"... failed to fully initialize or become live: {reason}"])
    assert msg.startswith(
        "stopped waiting for Job team-a/model-download to finish (condition Complete or Failed): the update was cancelled."
    )
    assert "kubectl describe job/model-download -n team-a" in msg and "next `pulumi up` waits for it again" in msg


def test_a_non_timeout_error_is_reported_as_such():
    msg = _job_wait().failed(['admission webhook "x" denied the request: nope'])
    assert msg.startswith("waiting for Job team-a/model-download to finish (condition Complete or Failed) failed.")
    assert "gave up" not in msg and "denied the request: nope" in msg


FAILED_STATUS = {
    "active": 0,
    "failed": 4,
    "conditions": [
        {
            "type": "FailureTarget",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
        {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        },
    ],
}


def test_job_failure_names_the_reason_the_commands_and_the_retry():
    msg = waits.job_failure(
        _job_wait(), "model-download", "team-a", FAILED_STATUS, "urn:pulumi:s::p::x$kubernetes:batch/v1:Job::j"
    )
    assert "download Job team-a/model-download failed" in msg
    assert "Failed=True (BackoffLimitExceeded: Job has reached the specified backoff limit)" in msg
    assert "pods active 0, succeeded 0, failed 4" in msg
    assert "kubectl describe job/model-download -n team-a" in msg and "kubectl logs job/model-download -n team-a" in msg
    assert "pulumi up --replace 'urn:pulumi:s::p::x$kubernetes:batch/v1:Job::j'" in msg


@pytest.mark.parametrize(
    "status",
    [
        None,
        {},
        {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1},
        {"conditions": [{"type": "Failed", "status": "False"}]},
    ],
)
def test_job_failure_is_none_unless_failed_is_true(status):
    assert waits.job_failure(_job_wait(), "model-download", "team-a", status) is None


def test_job_failure_reads_typed_outputs_too():
    class C:  # the SDK's output types expose attributes, not keys
        def __init__(self, **kw):
            self.__dict__.update(kw)

    status = C(
        active=0,
        succeeded=0,
        failed=1,
        conditions=[C(type="Failed", status="True", reason="DeadlineExceeded", message="too long")],
    )
    assert "Failed=True (DeadlineExceeded: too long)" in waits.job_failure(None, "j", "n", status)


def test_seen_from_live_objects():
    assert waits.seen_from_object("Job", {"status": {"active": 1}}) == "pods active 1, succeeded 0, failed 0; no conditions"
    assert (
        waits.seen_from_object(
            "DynamoGraphDeployment",
            {
                "status": {
                    "state": "pending",
                    "conditions": [{"type": "Ready", "status": "False", "reason": "Pending", "message": "0/2 ready"}],
                }
            },
        )
        == "state pending; Ready=False (Pending: 0/2 ready)"
    )
    assert waits.seen_from_object("DynamoGraphDeployment", {}) == "no conditions"
    # A live claim without a class: the cluster had no default class (admission fills it in otherwise), so the
    # message must not blame "the default class" and must say what to set.
    no_class = waits.seen_from_object("PersistentVolumeClaim", {"spec": {}, "status": {"phase": "Pending"}})
    assert "default class" not in no_class and "no default StorageClass" in no_class and "dynamo:storage.className" in no_class
    assert (
        waits.seen_from_object("PersistentVolumeClaim", {"spec": {"storageClassName": "efs-sc"}, "status": {"phase": "Pending"}})
        == "phase Pending, storage class efs-sc"
    )


# ---- the program under mocks: options the engine receives -------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch):
    """customTimeouts and error hooks of every registration (harness records the rest)."""
    seen: dict[str, dict] = {}
    original = harness.RecordingMonitor.RegisterResource

    def register(self, request):
        ct = request.customTimeouts
        seen[request.name] = {"create": ct.create, "update": ct.update, "on_error": list(request.hooks.on_error)}
        return original(self, request)

    monkeypatch.setattr(harness.RecordingMonitor, "RegisterResource", register)
    return seen


def test_program_sets_custom_timeouts_and_error_hooks_on_every_wait(recorded):
    run = run_program({**BASE, "wait": {"jobTimeout": "3m", "dgdTimeout": "75s"}}, {"hfToken": CANARY})
    job = run.one("kubernetes:batch/v1:Job").name
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment").name
    pvc = run.one("kubernetes:core/v1:PersistentVolumeClaim").name
    assert (recorded[job]["create"], recorded[job]["update"]) == ("180s", "180s")
    assert (recorded[dgd]["create"], recorded[dgd]["update"]) == ("75s", "75s")
    assert recorded[pvc]["create"] == ""  # the provider ignores it for PVCs (fixed 5 minutes)
    for name in (job, dgd, pvc):
        assert len(recorded[name]["on_error"]) == 1, name
    cm = run.one("kubernetes:core/v1:ConfigMap").name
    assert recorded[cm]["on_error"] == [] and recorded[cm]["create"] == ""


def test_no_waits_no_hooks_no_timeouts(recorded):
    run = run_program({**BASE, "wait": {"enabled": False}}, {"hfToken": CANARY})
    for r in run.resources:
        if r.type.startswith("kubernetes:") and not r.type.startswith("pulumi:providers"):
            assert recorded[r.name]["on_error"] == [] and recorded[r.name]["create"] == "", r.name


def test_a_failed_download_stops_up_before_the_dgd(monkeypatch):
    """The Job's wait ends on Failed too; the program then fails with the Job's reason and never registers the DGD."""
    original = harness.Mocks.new_resource

    def new_resource(self, args):
        rid, state = original(self, args)
        if args.typ == "kubernetes:batch/v1:Job":
            state = {**state, "status": FAILED_STATUS}
        return rid, state

    monkeypatch.setattr(harness.Mocks, "new_resource", new_resource)
    with pytest.raises(Exception) as e:
        run_program(BASE, {"hfToken": CANARY})
    text = str(e.value)
    assert "download Job dynamo/" in text and "BackoffLimitExceeded" in text and "pulumi up --replace" in text
    assert not harness.LAST_RUN.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")


def test_a_completed_download_lets_the_dgd_through(monkeypatch):
    original = harness.Mocks.new_resource

    def new_resource(self, args):
        rid, state = original(self, args)
        if args.typ == "kubernetes:batch/v1:Job":
            state = {**state, "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
        return rid, state

    monkeypatch.setattr(harness.Mocks, "new_resource", new_resource)
    run = run_program(BASE, {"hfToken": CANARY})
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    assert run.urn_of("kubernetes:batch/v1:Job") in dgd.dependencies
