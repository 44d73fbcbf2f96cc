"""The Dynamo policies as pulumi-policy objects (``__main__.py`` serves them as a pack)."""

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy

import dynamo_policies as p


def plain(x):
    """pulumi-policy hands props over as read-only proxies (not dict/list); the checks take plain data."""
    if hasattr(x, "items"):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
        return x
    return [plain(v) for v in x]


def _images(args, report):
    p.check_images_pinned(plain(args.props), report)


def _hf(args, report):
    p.check_hf_token_from_secret(plain(args.props), report)


def _efa(args, report):
    p.check_efa_disagg(args.resource_type, plain(args.props), plain(args.get_config()), report)


def _gpu(args, report):
    p.check_gpu_fits_node(plain(args.props), plain(args.get_config()), report)


def _cache(args, report):
    p.check_model_cache_retained_cfg(args.resource_type, args.name, bool(args.opts.protect), plain(args.get_config()), report)


POLICIES = [
    ResourceValidationPolicy(
        name="images-pinned",
        description="Every container image has a fixed tag (not latest) or a digest.",
        validate=_images,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    ResourceValidationPolicy(
        name="hf-token-from-secret",
        description="HF_TOKEN / HUGGING_FACE_HUB_TOKEN only come from a Secret.",
        validate=_hf,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    ResourceValidationPolicy(
        name="efa-disagg-workers",
        description="On EFA stacks, disaggregated workers request EFA and use LIBFABRIC for KV transfer.",
        validate=_efa,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties={"fabric": {"type": "string"}}),
    ),
    ResourceValidationPolicy(
        name="gpu-fits-node",
        description="A pod's nvidia.com/gpu request fits on one node of the stack's GPU type.",
        validate=_gpu,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(
            properties={"gpu": {"type": "string"}, "instanceType": {"type": "string"}, "gpusPerNode": {"type": "integer"}}
        ),
    ),
    ResourceValidationPolicy(
        name="model-cache-retained",
        description="The model-cache PVC is retained on delete (dynamo:storage.protect).",
        validate=_cache,
        enforcement_level=EnforcementLevel.ADVISORY,
        config_schema=PolicyConfigSchema(
            properties={"storageProtect": {"type": "boolean"}, "allowUnretainedCache": {"type": "boolean"}}
        ),
    ),
]
