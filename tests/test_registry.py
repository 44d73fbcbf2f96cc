"""The one registry of choices (stacks/registry/__init__.py): everything that lists choices derives from it."""

from pathlib import Path
from typing import get_args

import pytest

import aws_reference
from stacks import catalog, registry
from stacks.registry import gpus
from stacks.catalog.model import AXES
from stacks.config.keys import ConfigError, StackConfig, parse

README = Path(__file__).resolve().parent.parent / "README.md"


def test_catalog_axes_are_the_registry():
    assert AXES == registry.axes()


@pytest.mark.parametrize("axis", sorted(registry.axes()))
def test_config_choices_are_the_registry(axis):
    ann = StackConfig.model_fields[axis].annotation
    choices = [a for a in get_args(ann) if a is not type(None)]
    if len(choices) == 1 and get_args(choices[0]):  # Optional[Literal[...]]
        choices = list(get_args(choices[0]))
    assert tuple(choices) == registry.axes()[axis]


def test_every_target_uses_registry_values_and_its_gpu_label():
    for t in catalog.targets().values():
        for axis, values in registry.axes().items():
            assert t.axis(axis) is None or t.axis(axis) in values, (t.id, axis)
        assert registry.MODELS[t.model].id == t.model


def test_gpus_reference_the_instance_data_without_copying_it():
    """A GPU with an instance names one that carries it (same label and arch); a GPU registered without one (existing
    clusters only) has no default instance, and asking for its EKS shape names it and the missing data."""
    for g in registry.GPUS.values():
        if g.instance is None:
            assert g.id not in gpus.DEFAULT_INSTANCE and gpus.default_shape(g.id) is None
            with pytest.raises(ValueError, match=f"GPU '{g.id}' has no EC2 instance data"):
                gpus.shape_for(g.id)
            continue
        shape = gpus.INSTANCES[g.instance]
        assert (shape.gpu, shape.product, shape.kubernetes_arch) == (g.id, g.label, g.arch), g
        assert gpus.default_shape(g.id) is shape and g.instance in gpus.HOSTS, g
    assert gpus.DEFAULT_INSTANCE == {g.id: g.instance for g in registry.GPUS.values() if g.instance}


@pytest.mark.parametrize("instance_type", sorted(gpus.INSTANCES))
def test_instance_data_is_the_aws_reference(instance_type):
    """Every instance of stacks/registry/gpus.py has the GPUs, network cards, EFA interfaces, EFA devices per GPU and
    architecture the reference's AWS facts state (aws/FACTS.md, each row with its source). Where the reference does
    not state the EFA layout (p6e-gb200: to be read from DescribeInstanceTypes), the product must mark its own layout
    unverified (preflight then checks it against NetworkInfo.NetworkCards)."""
    shape, facts = gpus.INSTANCES[instance_type], aws_reference.instance(instance_type)
    ours = (shape.gpus_per_node, shape.network_cards, shape.arch, shape.gpu.upper())
    assert ours == (facts.gpus, facts.network_cards, facts.arch, facts.gpu_model), (
        f"{instance_type}: (GPUs, network cards, arch, GPU) {ours} in stacks/registry/gpus.py, "
        f"{(facts.gpus, facts.network_cards, facts.arch, facts.gpu_model)} in {aws_reference.FACTS} ({facts.source})"
    )
    if facts.efa_interfaces is None:
        assert not shape.verified, f"{instance_type}: {aws_reference.FACTS} does not confirm an EFA layout ({facts.source})"
        return
    assert shape.verified
    assert (shape.efa_interfaces, shape.efa_per_gpu) == (facts.efa_interfaces, facts.efa_per_gpu), (
        f"{instance_type}: {shape.efa_interfaces} EFA interfaces ({shape.efa_per_gpu} per GPU) in stacks/registry/gpus.py, "
        f"{facts.efa_interfaces} ({facts.efa_per_gpu} per GPU) in {aws_reference.FACTS} ({facts.source})"
    )
    assert len(set(shape.efa_cards)) == shape.efa_interfaces and all(0 <= c < facts.network_cards for c in shape.efa_cards)


def test_a_gpu_without_instance_data_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(registry.GPUS, "gpu-x", registry.Gpu("gpu-x", "NVIDIA-X", None))
    assert gpus.default_shape("gpu-x") is None and gpus.host_type_for("gpu-x") == gpus.EXISTING_HOST
    with pytest.raises(ValueError, match=r"GPU 'gpu-x' has no EC2 instance data: .*stacks/registry/gpus.py INSTANCES"):
        gpus.shape_for("gpu-x")
    with pytest.raises(
        ValueError, match=r"instance type 'p5.48xlarge' carries h100, not gpu-x; choose one of: none \(gpu-x has no EC2"
    ):
        gpus.shape_for("gpu-x", "p5.48xlarge")


def test_readme_table_is_generated_from_the_registry():
    text = README.read_text()
    for row in registry.readme_rows():
        assert row in text, f"README 'Choosing what to serve' is out of date; expected the row:\n{row}"


def test_unknown_value_names_key_choices_and_closest():
    with pytest.raises(ConfigError) as e:
        parse({"gpu": "h20"})
    *rest, last = (repr(g) for g in registry.GPUS)
    assert f"dynamo:gpu: 'h20' is not valid; choose one of {', '.join(rest)} or {last}; did you mean 'h200'?" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse({"target": "lightning-vllm-agg-h100-dspak"})
    assert "did you mean 'lightning-vllm-agg-h100-dspark'" in str(e.value)


def test_registry_lookups_explain_unknown_gpus():
    assert registry.label("gb200") == "NVIDIA-GB200"
    with pytest.raises(ValueError, match="'h10' is not in the registry; did you mean 'h100'"):
        registry.gpu("h10")
