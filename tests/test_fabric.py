"""The AWS EFA fabric profile applied to recipes built for other fabrics."""

import json

import pytest

import aws_reference
from stacks.registry import GPUS
from stacks.config.keys import ConfigError
from stacks.program.render import render_config


def workers(objs):
    dgd = next(o for o in objs if o["kind"] == "DynamoGraphDeployment")
    return [c for c in dgd["spec"]["components"] if c["type"] in ("prefill", "decode")]


def reference_efa_per_gpu(gpu: str) -> int:
    """EFA devices per GPU of the GPU's default instance (stacks/registry GPUS), from the reference's AWS facts."""
    return aws_reference.efa_per_gpu(GPUS[gpu].instance)


def kv_config(main):
    args = main["args"]
    for i, a in enumerate(args):
        if a == "--kv-transfer-config":
            return json.loads(args[i + 1])
        if a.startswith("--kv-transfer-config="):
            return json.loads(a.split("=", 1)[1])


def test_efa_profile_on_an_infiniband_recipe():
    objs = render_config({"gpu": "h200", "topology": "disagg", "fabricProfile": "aws-efa"})
    per_gpu = reference_efa_per_gpu("h200")  # p5en.48xlarge (the H200 default): 16 EFA / 8 GPU
    for w in workers(objs):
        main = w["podTemplate"]["spec"]["containers"][0]
        for part in ("requests", "limits"):
            assert main["resources"][part]["vpc.amazonaws.com/efa"] == str(
                per_gpu * int(main["resources"][part]["nvidia.com/gpu"])
            )
            assert "rdma/ib" not in main["resources"][part]
        assert kv_config(main)["kv_connector_extra_config"]["backends"] == ["LIBFABRIC"]
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["FI_PROVIDER"] == "efa" and env["DYN_KVBM_NIXL_BACKEND_LIBFABRIC"] == "true"
        assert main["securityContext"]["privileged"] is True


def test_efa_count_follows_the_workers_gpu_count():
    objs = render_config({"model": "nemotron-3-ultra", "gpu": "h200", "topology": "disagg", "fabricProfile": "aws-efa"})
    for w in workers(objs):
        res = w["podTemplate"]["spec"]["containers"][0]["resources"]
        assert res["limits"]["vpc.amazonaws.com/efa"] == str(reference_efa_per_gpu("h200") * int(res["limits"]["nvidia.com/gpu"]))


@pytest.mark.parametrize(
    "model, gpu", [("nemotron-3-ultra", "h200"), ("nemotron-3-ultra", "b200"), ("nemotron-3.5-lightning", "h100")]
)
def test_efa_devices_per_gpu_come_from_the_instance(model, gpu):
    """Each worker requests its GPUs times the EFA devices per GPU the reference states for the GPU's default instance
    (p5.48xlarge 4, p5en.48xlarge 2, p6-b200.48xlarge 1)."""
    from stacks.registry.gpus import efa_per_gpu

    per_gpu = reference_efa_per_gpu(gpu)
    assert efa_per_gpu(gpu) == per_gpu
    objs = render_config({"model": model, "gpu": gpu, "topology": "disagg", "fabricProfile": "aws-efa"})
    for w in workers(objs):
        res = w["podTemplate"]["spec"]["containers"][0]["resources"]
        assert res["limits"]["vpc.amazonaws.com/efa"] == str(per_gpu * int(res["limits"]["nvidia.com/gpu"]))


def test_profile_on_an_aggregated_target_is_a_config_error():
    with pytest.raises(ConfigError, match="dynamo:fabricProfile: 'aws-efa'.*no disaggregated workers"):
        render_config({"gpu": "h100", "fabricProfile": "aws-efa"})


def test_eks_refuses_an_infiniband_recipe_without_the_profile():
    from stacks.cluster import check_fabric_on_eks
    from stacks.config.keys import parse, select_target

    t = select_target(parse({"gpu": "b200", "topology": "disagg"}))
    with pytest.raises(ConfigError, match="set dynamo:fabricProfile: aws-efa"):
        check_fabric_on_eks(t, None)
    check_fabric_on_eks(t, "aws-efa")


def test_efa_profile_on_motif_replaces_ucx():
    objs = render_config({"model": "motif-3", "topology": "disagg", "fabricProfile": "aws-efa"})
    dgd = next(o for o in objs if o["kind"] == "DynamoGraphDeployment")
    ws = [c for c in dgd["spec"]["components"] if c["type"] != "frontend"]
    assert len(ws) == 2
    for w in ws:
        main = w["podTemplate"]["spec"]["containers"][0]
        assert kv_config(main)["kv_connector_extra_config"]["backends"] == ["LIBFABRIC"]


def test_efa_profile_inside_ultra_launcher_script():
    objs = render_config({"model": "nemotron-3-ultra", "gpu": "b200", "topology": "disagg", "fabricProfile": "aws-efa"})
    for w in workers(objs):
        script = w["podTemplate"]["spec"]["containers"][0]["args"][0]
        assert '"backends":["LIBFABRIC"]' in script
