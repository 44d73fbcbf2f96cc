"""The one registry of choices (stacks/registry.py): everything that lists choices derives from it."""
from pathlib import Path
from typing import get_args

import pytest

from stacks import catalog, gpus, registry
from stacks.catalog.model import AXES
from stacks.config import ConfigError, StackConfig, parse

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
    for g in registry.GPUS.values():
        shape = gpus.INSTANCES[g.instance]
        assert (shape.gpu, shape.product, shape.kubernetes_arch) == (g.id, g.label, g.arch), g
    assert gpus.DEFAULT_INSTANCE == {g.id: g.instance for g in registry.GPUS.values()}


def test_readme_table_is_generated_from_the_registry():
    text = README.read_text()
    for row in registry.readme_rows():
        assert row in text, f"README 'Choosing what to serve' is out of date; expected the row:\n{row}"


def test_unknown_value_names_key_choices_and_closest():
    with pytest.raises(ConfigError) as e:
        parse({"gpu": "h20"})
    assert "dynamo:gpu: 'h20' is not valid; choose one of 'h100', 'h200', 'b200' or 'gb200'; did you mean 'h200'?" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse({"target": "lightning-vllm-agg-h100-dspak"})
    assert "did you mean 'lightning-vllm-agg-h100-dspark'" in str(e.value)


def test_registry_lookups_explain_unknown_gpus():
    assert registry.label("gb200") == "NVIDIA-GB200"
    with pytest.raises(ValueError, match="'h10' is not in the registry; did you mean 'h100'"):
        registry.gpu("h10")
