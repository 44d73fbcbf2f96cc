"""``python -m stacks preflight``: each check under moto, with botocore's Stubber where moto lacks the API.

moto 5.2 gaps these tests work around (the Stubber is only used for those calls):
- ec2 create/describe_capacity_reservations: NotImplementedError;
- service-quotas get_service_quota for ec2: NoSuchResourceException (moto knows the "vpc" service only).
"""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from stacks.cli import preflight
from stacks.cli.preflight import FAIL, PASS, SKIP, WARN, PreflightRequest, run_checks
from stacks.registry.gpus import INSTANCES

P5 = "p5.48xlarge"


# moto 5 (moto/core/config.py, moto/settings.py): by default each mock start drops boto3's default session, so every
# test's first client reads botocore's service models (EC2's is megabytes of JSON) again, and each new EC2 backend
# loads moto's ~70,000 default AMIs. Neither is state a test can see: the models are read-only, and these tests
# register the one image they launch. Together they were half of this module's CPU time.
MOTO_CONFIG = {"core": {"reset_boto3_session": False}}


@pytest.fixture
def aws(monkeypatch):
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    with mock_aws(config=MOTO_CONFIG):
        yield


def ec2(region="us-east-1"):
    return boto3.client("ec2", region_name=region)


def image(client) -> str:
    """The id of an image registered in the mock account (the mock loads none of its own)."""
    return client.register_image(Name="gpu-node", RootDeviceName="/dev/xvda")["ImageId"]


def offered_zones(client, instance_type):
    r = client.describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )
    return sorted(o["Location"] for o in r["InstanceTypeOfferings"])


def all_zones(client):
    return sorted(z["ZoneName"] for z in client.describe_availability_zones()["AvailabilityZones"])


def req(**kw):
    base = dict(region="us-east-1", availability_zone="us-east-1a", instance_type=P5, nodes=2, efa=True)
    return PreflightRequest(**{**base, **kw})


def by_name(results):
    return {r.name: r for r in results}


def quota_client(value=None, error=None, region="us-east-1"):
    """A service-quotas client whose get_service_quota answers from a Stubber (moto has no ec2 quotas)."""
    c = boto3.client("service-quotas", region_name=region)
    s = Stubber(c)
    params = {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"}
    if error:
        s.add_client_error("get_service_quota", service_error_code=error, http_status_code=403, expected_params=params)
    else:
        s.add_response(
            "get_service_quota",
            {
                "Quota": {
                    "ServiceCode": "ec2",
                    "QuotaCode": "L-417A185B",
                    "QuotaName": "Running On-Demand P instances",
                    "Value": float(value),
                }
            },
            params,
        )
    s.activate()
    return c


class _SplitEC2:
    """moto's ec2 client, except describe_capacity_reservations, which goes to a stubbed client."""

    def __init__(self, moto_client, stubbed):
        self._moto, self._stubbed = moto_client, stubbed

    def describe_capacity_reservations(self, **kw):
        return self._stubbed.describe_capacity_reservations(**kw)

    def __getattr__(self, name):
        return getattr(self._moto, name)


def with_reservation(client, *, instance_type=P5, az="us-east-1a", count=1, state="active", kind="default"):
    """(ec2 client, reservation id): moto's create_capacity_reservation when it has one, else a Stubber answer."""
    try:
        cr = client.create_capacity_reservation(
            InstanceType=instance_type, InstancePlatform="Linux/UNIX", AvailabilityZone=az, InstanceCount=count
        )
        return client, cr["CapacityReservation"]["CapacityReservationId"]
    except NotImplementedError:
        pass  # moto 5.2: "The create_capacity_reservation action has not been implemented"
    rid = "cr-0123456789abcdef0"
    stubbed = boto3.client("ec2", region_name=client.meta.region_name)
    s = Stubber(stubbed)
    s.add_response(
        "describe_capacity_reservations",
        {
            "CapacityReservations": [
                {
                    "CapacityReservationId": rid,
                    "InstanceType": instance_type,
                    "InstancePlatform": "Linux/UNIX",
                    "AvailabilityZone": az,
                    "TotalInstanceCount": count,
                    "AvailableInstanceCount": count,
                    "State": state,
                    "ReservationType": kind,
                    "StartDate": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                }
            ]
        },
        {"CapacityReservationIds": [rid]},
    )
    s.activate()
    return _SplitEC2(client, stubbed), rid


# --------------------------------------------------------------------------- 1. offering


def test_offering_pass_in_a_zone_moto_lists(aws):
    c = ec2("us-east-1")
    zones = offered_zones(c, P5)
    assert zones, "moto lists no us-east-1 zone for p5.48xlarge"
    r = by_name(run_checks(req(availability_zone=zones[0], efa=False), c, None))["offering"]
    assert r.status == PASS and zones[0] in r.message


def _region_with_unoffered_zone(instance_type):
    for region in boto3.session.Session().get_available_regions("ec2"):
        c = ec2(region)
        offered = offered_zones(c, instance_type)
        missing = sorted(set(all_zones(c)) - set(offered))
        if offered and missing:
            return region, missing[0], offered
    pytest.fail(f"moto has no region with {instance_type} offered in some zones but not others")


def test_offering_fail_lists_offering_zones_and_names_key(aws):
    region, az, offered = _region_with_unoffered_zone(P5)
    r = by_name(run_checks(req(region=region, availability_zone=az, efa=False), ec2(region), None))["offering"]
    assert r.status == FAIL
    assert "dynamo:cluster.gpuAvailabilityZone" in r.message
    assert all(z in r.message for z in offered)


def test_offering_fail_when_region_has_none(aws):
    for region in boto3.session.Session().get_available_regions("ec2"):
        if not offered_zones(ec2(region), P5):
            break
    else:
        pytest.skip("moto offers p5.48xlarge in every region")
    r = by_name(run_checks(req(region=region, availability_zone=f"{region}a", efa=False), ec2(region), None))["offering"]
    assert r.status == FAIL and "dynamo:cluster.region" in r.message and "dynamo:cluster.instanceType" in r.message


def test_offering_warns_when_zone_unset(aws):
    r = by_name(run_checks(req(availability_zone=None, efa=False), ec2(), None))["offering"]
    assert r.status == WARN and "dynamo:cluster.gpuAvailabilityZone" in r.message


# --------------------------------------------------------------------------- 2. EFA


def test_efa_on_matches_catalog(aws):
    r = by_name(run_checks(req(efa=True), ec2(), None))["efa"]
    assert r.status == PASS, r.message
    assert str(INSTANCES[P5].efa_interfaces) in r.message


def test_efa_off_is_skipped_not_failed(aws):
    results = run_checks(req(efa=False, instance_type="m5.large"), ec2(), None)
    r = by_name(results)["efa"]
    assert r.status == SKIP and r.ok and "dynamo:cluster.efa" in r.message


def test_efa_on_unsupported_instance_fails(aws):
    r = by_name(run_checks(req(efa=True, instance_type="m5.large"), ec2(), None))["efa"]
    assert r.status == FAIL
    assert (
        "does not support EFA" in r.message and "dynamo:cluster.efa" in r.message and "dynamo:cluster.instanceType" in r.message
    )


def test_efa_fewer_interfaces_than_catalog_fails(aws):
    # What moto reports for p5.48xlarge, with EfaInfo cut to half of what the catalog attaches.
    info = ec2().describe_instance_types(InstanceTypes=[P5])["InstanceTypes"][0]
    info["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"] = INSTANCES[P5].efa_interfaces // 2
    r = preflight.check_efa(req(efa=True), info, None)
    assert r.status == FAIL and "dynamo:gpu" in r.message and str(INSTANCES[P5].efa_interfaces) in r.message


# --------------------------------------------------------------------------- 3. capacity reservation


def test_reservation_too_small_says_how_many_missing(aws):
    client, rid = with_reservation(ec2(), count=1)
    r = by_name(run_checks(req(nodes=3, efa=False, capacity_reservation_id=rid), client, None))["reservation"]
    assert r.status == FAIL
    assert "2 missing" in r.message and "dynamo:cluster.gpuNodes" in r.message


def test_reservation_other_zone_says_pin_the_zone(aws):
    client, rid = with_reservation(ec2(), az="us-east-1b", count=4)
    r = by_name(run_checks(req(nodes=2, efa=False, capacity_reservation_id=rid), client, None))["reservation"]
    assert r.status == FAIL and "dynamo:cluster.gpuAvailabilityZone: us-east-1b" in r.message


def test_reservation_other_type_and_not_active(aws):
    client, rid = with_reservation(ec2(), instance_type="p5en.48xlarge", count=4, state="scheduled")
    r = by_name(run_checks(req(nodes=2, efa=False, capacity_reservation_id=rid), client, None))["reservation"]
    assert r.status == FAIL
    assert "dynamo:cluster.instanceType: p5en.48xlarge" in r.message and "scheduled" in r.message


def test_reservation_big_enough_passes(aws):
    client, rid = with_reservation(ec2(), count=2)
    r = by_name(run_checks(req(nodes=2, efa=False, capacity_reservation_id=rid), client, None))["reservation"]
    assert r.status == PASS, r.message


def test_reservation_unknown_id_fails(aws):
    c = ec2()
    s = Stubber(c)
    s.add_client_error(
        "describe_capacity_reservations", service_error_code="InvalidCapacityReservationId.NotFound", http_status_code=400
    )
    with s:
        r = preflight.check_reservation(req(capacity_reservation_id="cr-0000000000000000f"), c)[0]
    assert r.status == FAIL and "dynamo:cluster.capacityReservationId" in r.message


# --------------------------------------------------------------------------- 4. quota


def test_quota_too_low_fails_with_nodes_key(aws):
    r = by_name(run_checks(req(nodes=2, efa=False), ec2(), quota_client(192)))["quota"]
    assert r.status == FAIL
    assert "384" in r.message and "dynamo:cluster.gpuNodes: 1" in r.message and "L-417A185B" in r.message


def test_quota_counts_running_p_instances(aws):
    c = ec2()
    c.run_instances(ImageId=image(c), InstanceType=P5, MinCount=1, MaxCount=1)
    r = by_name(run_checks(req(nodes=1, efa=False), c, quota_client(384)))["quota"]
    # 384 quota - 192 used by the running p5 leaves exactly one node's worth.
    assert r.status == PASS, r.message
    r = by_name(run_checks(req(nodes=2, efa=False), c, quota_client(384)))["quota"]
    assert r.status == FAIL and "dynamo:cluster.gpuNodes: 1" in r.message


def test_quota_enough_passes(aws):
    r = by_name(run_checks(req(nodes=2, efa=False), ec2(), quota_client(1536)))["quota"]
    assert r.status == PASS


def test_quota_warns_when_moto_has_no_ec2_quotas(aws):
    r = by_name(run_checks(req(efa=False), ec2(), boto3.client("service-quotas", region_name="us-east-1")))["quota"]
    assert r.status == WARN and r.ok and "unavailable" in r.message


def test_quota_warns_when_access_denied(aws):
    r = by_name(run_checks(req(efa=False), ec2(), quota_client(error="AccessDeniedException")))["quota"]
    assert r.status == WARN and "AccessDeniedException" in r.message


def test_quota_skipped_for_capacity_blocks(aws):
    r = by_name(run_checks(req(efa=False, market_type="capacity-block"), ec2(), quota_client(0)))["quota"]
    assert r.status == WARN and "dynamo:cluster.marketType" in r.message
    client, rid = with_reservation(ec2(), count=2, kind="capacity-block")
    r = by_name(run_checks(req(efa=False, capacity_reservation_id=rid), client, None))["quota"]
    assert r.status == WARN


# --------------------------------------------------------------------------- request from a stack, CLI


def _stack(tmp_path, name, body):
    (tmp_path / f"Pulumi.{name}.yaml").write_text(body)
    return name


def test_request_from_stack_disagg_h100_defaults(tmp_path):
    name = _stack(
        tmp_path,
        "t",
        "config:\n  aws:region: us-west-2\n  dynamo:gpu: h100\n  dynamo:topology: disagg\n"
        "  dynamo:cluster:\n    mode: eks\n    availabilityZones: [us-west-2a, us-west-2b]\n    gpuAvailabilityZone: us-west-2b\n",
    )
    r = preflight.request_from_stack(name, tmp_path)
    assert (r.region, r.availability_zone, r.instance_type) == ("us-west-2", "us-west-2b", "p5.48xlarge")
    assert r.efa is True  # h100 disagg targets use the aws-efa fabric
    assert r.nodes >= 1 and r.capacity_reservation_id is None and r.market_type == "on-demand"


def test_request_from_stack_cluster_keys(tmp_path):
    name = _stack(
        tmp_path,
        "t",
        "config:\n  aws:region: us-east-1\n  dynamo:gpu: h200\n  dynamo:topology: agg\n"
        "  dynamo:cluster:\n    mode: eks\n    region: us-east-1\n    availabilityZones: [us-east-1a, us-east-1c]\n    gpuAvailabilityZone: us-east-1c\n"
        "    instanceType: p5e.48xlarge\n    gpuNodes: 3\n    efa: true\n"
        "    capacityReservationId: cr-0123456789abcdef0\n    marketType: capacity-block\n",
    )
    r = preflight.request_from_stack(name, tmp_path)
    assert r == PreflightRequest("us-east-1", "us-east-1c", "p5e.48xlarge", 3, True, "cr-0123456789abcdef0", "capacity-block")


def test_request_from_stack_refuses_contradicting_aws_region(tmp_path):
    from stacks.config.keys import ConfigError

    name = _stack(
        tmp_path,
        "t",
        "config:\n  aws:region: us-west-2\n  dynamo:gpu: h200\n  dynamo:cluster:\n    mode: eks\n    region: us-east-1\n",
    )
    with pytest.raises(ConfigError, match="contradicts aws:region 'us-west-2'"):
        preflight.request_from_stack(name, tmp_path)


def test_request_from_stack_resolves_the_unpinned_zone_and_final_node_count(tmp_path):
    name = _stack(
        tmp_path,
        "t",
        "config:\n  dynamo:gpu: h100\n  dynamo:topology: disagg\n  dynamo:replicas:\n    VllmDecodeWorker: 9\n"
        "  dynamo:cluster:\n    mode: eks\n    region: us-east-2\n",
    )
    r = preflight.request_from_stack(name, tmp_path)
    assert (r.availability_zone, r.zone_pinned, r.nodes) == ("us-east-2a", False, 2)


@pytest.mark.parametrize("mode", ["render", "kubeconfig"])
def test_non_eks_stacks_skip_the_aws_checks(tmp_path, mode, capsys):

    name = _stack(tmp_path, "t", f"config:\n  dynamo:gpu: h100\n  dynamo:cluster:\n    mode: {mode}\n")
    assert preflight.request_from_stack(name, tmp_path) is None


def test_request_from_stack_rejects_instance_of_other_gpu(tmp_path):
    from stacks.config.keys import ConfigError

    name = _stack(
        tmp_path,
        "t",
        "config:\n  aws:region: us-east-1\n  dynamo:gpu: h100\n  dynamo:cluster:\n    mode: eks\n    instanceType: p6-b200.48xlarge\n",
    )
    with pytest.raises(ConfigError, match="dynamo:cluster.instanceType"):
        preflight.request_from_stack(name, tmp_path)


def test_cli_exit_codes(aws, monkeypatch, capsys):
    from stacks.__main__ import main

    zone = offered_zones(ec2(), P5)[0]
    monkeypatch.setattr(preflight, "requests_from_stack", lambda name: [req(availability_zone=zone, nodes=1)])
    assert main(["preflight", "--stack", "x"]) == 0  # quota WARNs under moto; WARN is not a failure
    out = capsys.readouterr().out.splitlines()
    assert [l.split()[1] for l in out[1:]] == ["offering", "efa", "reservation", "quota", "capacity", "local-zone"]
    monkeypatch.setattr(preflight, "requests_from_stack", lambda name: [req(availability_zone="us-east-1z")])
    assert main(["preflight", "--stack", "x"]) == 1
    assert "FAIL  offering" in capsys.readouterr().out


# --------------------------------------------------------------------------- reservations, zones, capacity and credentials


def test_scheduled_capacity_block_is_a_warning(aws):
    client, rid = with_reservation(ec2(), count=2, state="scheduled", kind="capacity-block")
    r = by_name(run_checks(req(nodes=2, efa=False, capacity_reservation_id=rid, market_type="capacity-block"), client, None))[
        "reservation"
    ]
    assert r.status == WARN and r.ok and "scheduled" in r.message


def test_scheduled_on_demand_reservation_still_fails(aws):
    client, rid = with_reservation(ec2(), count=2, state="scheduled")
    r = by_name(run_checks(req(nodes=2, efa=False, capacity_reservation_id=rid), client, None))["reservation"]
    assert r.status == FAIL and "scheduled" in r.message


def _reservation_client(**cr):
    rid = "cr-0123456789abcdef0"
    c = boto3.client("ec2", region_name="us-east-1")
    s = Stubber(c)
    base = {
        "CapacityReservationId": rid,
        "InstanceType": P5,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "State": "active",
        "ReservationType": "capacity-block",
    }
    s.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [{**base, **cr}]}, {"CapacityReservationIds": [rid]}
    )
    s.activate()
    return c, rid


def test_ended_reservation_fails_and_ending_soon_warns(aws):
    now = dt.datetime.now(dt.timezone.utc)
    c, rid = _reservation_client(EndDate=now - dt.timedelta(hours=1))
    r = preflight.check_reservation(req(nodes=2, capacity_reservation_id=rid), c)[0]
    assert r.status == FAIL and "ended" in r.message and "dynamo:cluster.capacityReservationId" in r.message
    c, rid = _reservation_client(EndDate=now + dt.timedelta(minutes=30))
    r = preflight.check_reservation(req(nodes=2, capacity_reservation_id=rid), c)[0]
    assert r.status == WARN and "under 2 h" in r.message


def test_unpinned_zone_other_than_the_reservation_says_pin_it(aws):
    c, rid = _reservation_client(AvailabilityZone="us-east-1d")
    r = preflight.check_reservation(req(nodes=2, capacity_reservation_id=rid, zone_pinned=False), c)[0]
    assert (
        r.status == FAIL
        and "gpuAvailabilityZone is not set" in r.message
        and "dynamo:cluster.gpuAvailabilityZone: us-east-1d" in r.message
    )


def test_on_demand_p_instances_warn_about_insufficient_capacity(aws):
    r = by_name(run_checks(req(efa=False), ec2(), None))["capacity"]
    assert r.status == WARN and r.ok and "InsufficientInstanceCapacity" in r.message and "dynamo:cluster.marketType" in r.message
    assert preflight.check_capacity(req(capacity_reservation_id="cr-0123456789abcdef0")).status == PASS


def test_without_credentials_one_line_no_traceback(monkeypatch, capsys, tmp_path):
    from stacks.__main__ import main

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(preflight, "requests_from_stack", lambda name: [req(nodes=1)])
    assert main(["preflight", "--stack", "x"]) == 1
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("FAIL  credentials") and "instanceType" not in lines[0]
    assert "Traceback" not in captured.out + captured.err


def test_credentials_rejected_is_one_line(aws):
    c = ec2()
    s = Stubber(c)
    s.add_client_error("describe_availability_zones", service_error_code="AuthFailure", http_status_code=401)
    with s, pytest.raises(preflight.CredentialsError, match="AuthFailure"):
        run_checks(req(), c, None)


def test_unverified_gb200_efa_layout_is_a_warning_with_the_command_to_compare(aws):
    gb = "p6e-gb200.36xlarge"
    info = {
        "NetworkInfo": {
            "EfaSupported": True,
            "EfaInfo": {"MaximumEfaInterfaces": 17},
            "NetworkCards": [{"NetworkCardIndex": i} for i in range(17)],
        }
    }
    r = preflight.check_efa(req(instance_type=gb, efa=True), info, None)
    assert r.status == WARN and "describe-instance-types --instance-types p6e-gb200.36xlarge" in r.message


# --------------------------------------------------------------------------- every GPU pool, Local Zone opt-in, G quota


def test_every_gpu_pool_is_checked_under_its_own_key(tmp_path):
    """A cluster-only stack with two pools and a single-target stack whose gpuPools names a second GPU: one request per
    pool, keyed dynamo:cluster.gpuPools[i] (before, only the first pool was checked)."""
    name = _stack(
        tmp_path,
        "c",
        "config:\n  dynamo:serve: []\n  dynamo:cluster:\n    mode: eks\n    region: us-east-1\n    gpuPools:\n"
        "      - {gpu: h100, nodes: 2}\n      - {gpu: b200, nodes: 1, availabilityZone: us-east-1b}\n",
    )
    reqs = preflight.requests_from_stack(name, tmp_path)
    assert [(r.key, r.instance_type, r.nodes, r.availability_zone) for r in reqs] == [
        ("dynamo:cluster.gpuPools[0]", "p5.48xlarge", 2, "us-east-1a"),
        ("dynamo:cluster.gpuPools[1]", "p6-b200.48xlarge", 1, "us-east-1b"),
    ]
    assert (
        reqs[1].k("gpuNodes") == "dynamo:cluster.gpuPools[1].nodes"
        and reqs[1].k("gpuAvailabilityZone") == "dynamo:cluster.gpuPools[1].availabilityZone"
    )
    name = _stack(
        tmp_path,
        "s",
        "config:\n  dynamo:gpu: h100\n  dynamo:topology: disagg\n  dynamo:cluster:\n    mode: eks\n    region: us-east-1\n    gpuPools:\n"
        "      - {gpu: h100}\n      - {gpu: b200, nodes: 3}\n",
    )
    reqs = preflight.requests_from_stack(name, tmp_path)
    assert [(r.key, r.instance_type) for r in reqs] == [
        ("dynamo:cluster.gpuPools[0]", "p5.48xlarge"),
        ("dynamo:cluster.gpuPools[1]", "p6-b200.48xlarge"),
    ]
    assert reqs[1].nodes == 3


def _zones_client(moto_client, zones: list[dict]):
    """moto's ec2 client, except describe_availability_zones(AllAvailabilityZones=True, ...): moto knows no Local Zones."""
    stubbed = boto3.client("ec2", region_name="us-east-1")
    s = Stubber(stubbed)
    s.add_response(
        "describe_availability_zones",
        {"AvailabilityZones": zones},
        {"AllAvailabilityZones": True, "ZoneNames": ["us-east-1-dfw-2a"]},
    )
    s.activate()

    class Split(_SplitEC2):
        def describe_availability_zones(self, **kw):
            return stubbed.describe_availability_zones(**kw) if kw else moto_client.describe_availability_zones()

    return Split(moto_client, stubbed)


LOCAL_ZONE = {"ZoneName": "us-east-1-dfw-2a", "ZoneType": "local-zone", "GroupName": "us-east-1-dfw-2", "RegionName": "us-east-1"}


@pytest.mark.parametrize("status, result", [("not-opted-in", FAIL), ("opted-in", PASS)])
def test_local_zone_opt_in_status(aws, status, result):
    client = _zones_client(ec2(), [{**LOCAL_ZONE, "OptInStatus": status}])
    r = preflight.check_local_zone(req(availability_zone="us-east-1-dfw-2a", key="dynamo:cluster.gpuPools[0]"), client)
    assert r.status == result
    if result == FAIL:
        assert (
            "aws ec2 modify-availability-zone-group --region us-east-1 --group-name us-east-1-dfw-2 --opt-in-status opted-in"
            in r.message
            and "dynamo:cluster.gpuPools[0].availabilityZone" in r.message
        )


def test_local_zone_unknown_and_availability_zone(aws):
    assert preflight.check_local_zone(req(availability_zone="us-east-1-dfw-2a"), _zones_client(ec2(), [])).status == FAIL
    assert preflight.check_local_zone(req(availability_zone="us-east-1a"), ec2()).status == SKIP


def _quota(code: str, values: list[float]):
    c = boto3.client("service-quotas", region_name="us-east-1")
    s = Stubber(c)
    for v in values:
        s.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": v}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
    s.activate()
    return c


def test_g_instances_use_the_g_and_vt_quota(aws):
    client = ec2()
    ami = image(client)
    client.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="g5.xlarge")
    client.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="p5.48xlarge")
    info = {"VCpuInfo": {"DefaultVCpus": 192}}
    r = preflight.check_quota(req(instance_type="g6e.48xlarge", nodes=1), client, _quota("L-DB2E81BA", [100]), info, None)
    assert (
        r.status == FAIL
        and "L-DB2E81BA (Running On-Demand G and VT instances) is 100 vCPUs, 4 in use by running G and VT instances" in r.message
    )
    assert preflight.family_quota("p5.48xlarge") == ("L-417A185B", "Running On-Demand P instances")
    assert preflight.family_quota("g6e.48xlarge")[0] == preflight.family_quota("vt1.24xlarge")[0] == "L-DB2E81BA"
    assert preflight._running_family_vcpus(client, "p") == 192  # the P instance counts against the other quota


def test_pools_of_one_family_share_its_quota(aws):
    client = ec2()
    zone = offered_zones(client, P5)[0]
    pools = [
        req(availability_zone=zone, nodes=1, key="dynamo:cluster.gpuPools[0]"),
        req(availability_zone=zone, nodes=1, key="dynamo:cluster.gpuPools[1]"),
    ]
    checked = preflight.run_stack_checks(pools, client, _quota("L-417A185B", [300, 300]))
    first, second = (by_name(results)["quota"] for _, results in checked)
    assert first.status == PASS and second.status == FAIL
    assert "192 for this stack's other GPU pools" in second.message and "dynamo:cluster.gpuPools[1].nodes" in second.message
