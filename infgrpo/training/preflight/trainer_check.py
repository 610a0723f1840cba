"""Lightning Trainer flags that a GRPO run cannot take, refused before the model loads.

    check_trainer_flags(config["trainer"])   # a step of preflight.door's STEPS; ConfigError names the flag
    world_size(config["trainer"])            # data-parallel processes the flags ask for (devices x num_nodes)

``GRPOModule`` steps its optimizer itself (Lightning's manual optimization): once a step, over the whole rollout,
in micro-batches it packs by ``model.update.token_budget``, clipping by ``model.optimizer.max_grad_norm``. Lightning
refuses its own accumulation and clipping with manual optimization, but only after the model loaded, in a
traceback that names no setting of ours. Its data parallelism must be DDP in processes launched before the module
is built (``ddp``: Lightning's subprocess launcher, or ``torchrun``): under ``ddp_spawn`` the module is pickled
into new processes and the rollout's length predictor gets no hidden states, and FSDP or DeepSpeed shard what the
sampler and the update expect whole (and on a CPU Lightning refuses them after loading). Each is one line here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.strategies import StrategyRegistry

from infgrpo.settings import ConfigError
from infgrpo.training.hparams import ModuleSettings

SUPPORTED = (
    "infgrpo trains data parallel with trainer.strategy: ddp, or sharded with trainer.strategy: fsdp2 (FSDP2 through "
    "Lightning's ModelParallelStrategy), and trainer.devices N"
)
REFUSED = ("fsdp", "fsdpstrategy", "deepspeed")
"""Strategy names and class names (lower-cased, up to a ``_`` or ``(``) of the sharding strategies refused: FSDP1
(Lightning's ``FSDPStrategy``) and DeepSpeed; FSDP2 (``fsdp2``, ``ModelParallelStrategy``) is the supported one."""
SHARDED = ("fsdp2", "fsdp2strategy", "modelparallelstrategy")
"""Names of the strategies that shard the policy (FSDP2)."""


def base_name(name: str) -> str:
    """``fsdp_cpu_offload`` -> ``fsdp``, ``deepspeed_stage_3`` -> ``deepspeed``, ``FSDPStrategy(spawn)`` ->
    ``fsdpstrategy``: the lower-cased name (a class path's last part) up to its first ``_`` or ``(``."""
    return name.lower().split("(")[0].rsplit(".", 1)[-1].split("_")[0]


def is_sharded_strategy(strategy: Any) -> bool:
    """Whether ``trainer.strategy`` (as parsed, or an instance) shards the policy with FSDP2."""
    name = strategy_name(strategy)
    return name is not None and base_name(name) in SHARDED


def strategy_name(strategy: Any) -> str | None:
    """The strategy's registry name or class name (``ddp_spawn``, ``fsdp``, ``FSDPStrategy``), its start method
    folded in (``DDPStrategy`` with ``start_method: spawn`` is ``DDPStrategy(spawn)``); None for ``auto``/unset."""
    if strategy is None or strategy == "auto":
        return None
    if isinstance(strategy, str):
        return strategy
    if isinstance(strategy, Mapping) or hasattr(strategy, "get"):  # a class_path / init_args mapping
        name = str(strategy.get("class_path") or "").rsplit(".", 1)[-1]
        method = (strategy.get("init_args") or {}).get("start_method")
        return f"{name}({method})" if method and method != "popen" else name
    name = type(strategy).__name__  # an instance (Python)
    method = getattr(strategy, "_start_method", None)
    return f"{name}({method})" if method and method != "popen" else name


def check_strategy(strategy: Any) -> None:
    """A ConfigError naming ``trainer.strategy`` for a sharding strategy (FSDP, DeepSpeed) or a spawned DDP."""
    name = strategy_name(strategy)
    if name is None:
        return
    lowered = name.lower()
    if base_name(name) in REFUSED:
        raise ConfigError(
            f"trainer.strategy={name!r} is not supported: {SUPPORTED}. For a model that does not fit one device "
            "use trainer.strategy: fsdp2"
        )
    if "spawn" in lowered:
        raise ConfigError(
            f"trainer.strategy={name!r} is not supported: it pickles the module into new processes, where the "
            "rollout's length predictor gets no hidden states; use trainer.strategy: ddp (Lightning launches the "
            "processes first; or torchrun)"
        )
    registry_name = isinstance(strategy, str) and "." not in strategy  # a dotted string is a class path
    if registry_name and strategy not in StrategyRegistry and base_name(strategy) not in SHARDED:
        raise ConfigError(  # Lightning's own list offers names infgrpo refuses (ddp_spawn, deepspeed, fsdp)
            f"trainer.strategy={name!r} is no strategy name: {SUPPORTED}; leave it at auto for one device, or give "
            "a strategy's class path"
        )


def check_model_parallel(strategy: Any) -> None:
    """A ConfigError for Lightning's ``ModelParallelStrategy`` given as a class with tensor parallelism or without
    one data-parallel mesh over all ranks (its defaults on one node: ``tensor_parallel_size`` = devices)."""
    if not (isinstance(strategy, Mapping) or hasattr(strategy, "get")) or strategy_name(strategy) is None:
        return
    if base_name(strategy_name(strategy)) != "modelparallelstrategy":
        return
    init = strategy.get("init_args") or {}
    tensor, data = init.get("tensor_parallel_size", "auto"), init.get("data_parallel_size", "auto")
    check_tensor_parallel(tensor, "trainer.strategy.init_args.tensor_parallel_size")
    if data == "auto":
        raise ConfigError(
            "trainer.strategy.init_args.data_parallel_size='auto' is one rank per node; set it to the number of "
            "processes (devices x num_nodes), or use trainer.strategy: fsdp2, which does"
        )


def check_tensor_parallel(size: Any, key: str) -> None:
    """A ConfigError naming ``key`` unless the tensor-parallel ``size`` is 1 (checked on the config before loading,
    and on the device mesh in ``GRPOModule.configure_model``)."""
    if size != 1:
        raise ConfigError(
            f"{key}={size!r} is not supported: infgrpo shards data parallel only (FSDP2); set it to 1 and "
            "data_parallel_size to the number of processes, or use trainer.strategy: fsdp2, which does"
        )


def check_sharded_mesh(mesh: Any, strategy: Any, settings: ModuleSettings) -> None:
    """``GRPOModule.configure_model``'s check (the Python API's) of a sharding ``strategy``'s device mesh: a
    tensor-parallel size of 1, then :func:`check_sharded_settings`."""
    if "tensor_parallel" in (mesh.mesh_dim_names or ()):
        check_tensor_parallel(mesh["tensor_parallel"].size(), "trainer.strategy.tensor_parallel_size")
    name, s = type(strategy).__name__, settings
    check_sharded_settings(name, s.quantization.load_in_4bit, s.sampler.cuda_graphs)


def check_sharded_policy(trainer: Mapping[str, Any], load_in_4bit: bool, cuda_graphs: str = "auto") -> None:
    """:func:`check_sharded_settings` when ``trainer.strategy`` shards the policy (``fsdp2``)."""
    if is_sharded_strategy(trainer.get("strategy")):
        check_sharded_settings(strategy_name(trainer.get("strategy")), load_in_4bit, cuda_graphs)


def check_sharded_settings(name: str, load_in_4bit: bool, cuda_graphs: str) -> None:
    """A ConfigError for what a sharded run (strategy ``name``) cannot take: 4-bit base weights (bitsandbytes'
    packed storage does not shard) and ``cuda_graphs: on`` (a graph replays the addresses of weights gathered anew
    each step; ``auto`` decodes without graphs there). The CLI checks before loading; ``configure_model`` again
    for the Python API."""
    if load_in_4bit:
        raise ConfigError(
            f"model.quantization.load_in_4bit=true is not supported with trainer.strategy={name!r}: "
            "bitsandbytes' 4-bit weights do not shard; train LoRA on bfloat16 weights sharded (model.policy.dtype: "
            "bfloat16), or 4-bit weights with trainer.strategy: ddp"
        )
    if cuda_graphs == "on":
        raise ConfigError(
            f"model.sampler.cuda_graphs='on' is not supported with trainer.strategy={name!r}: a graph replays the "
            "addresses of weights that each step gathers anew; use 'auto' (no graphs when sharded) or 'off'"
        )


def runs_on_cuda(accelerator: Any, cuda_available: bool) -> bool:
    """Whether ``trainer.accelerator`` puts the model on a CUDA device here (an accelerator object: assumed so)."""
    if accelerator is not None and not isinstance(accelerator, str):
        return True
    return cuda_available and (accelerator or "auto").lower() in ("auto", "gpu", "cuda")


def check_graph_device(cuda_graphs: str, on_cuda: bool, where: str) -> None:
    """A ConfigError for ``model.sampler.cuda_graphs: on`` when the run is not on a CUDA device (``where`` says on
    what it runs): the sampler refused it as it built its first decode step, after the model loaded."""
    if cuda_graphs == "on" and not on_cuda:
        raise ConfigError(
            f"model.sampler.cuda_graphs='on' needs a CUDA device, and {where}: use 'auto' (graphs on CUDA, none "
            "elsewhere) or 'off'"
        )


def check_trainer_flags(trainer: Mapping[str, Any]) -> None:
    """A ConfigError for the first flag of ``trainer`` (the parsed ``trainer`` section) that a GRPO run cannot take,
    naming the flag, its value and the setting of ours that does its job."""
    check_strategy(trainer.get("strategy"))
    check_model_parallel(trainer.get("strategy"))
    accumulate = trainer.get("accumulate_grad_batches")
    if accumulate is not None and accumulate != 1:
        raise ConfigError(
            f"trainer.accumulate_grad_batches={accumulate!r} is not supported: GRPOModule steps its optimizer once a "
            "step over the whole rollout (manual optimization), already in micro-batches; for more prompts a step "
            "raise data.batch_size (per rank), and size the micro-batches with model.update.token_budget"
        )
    clip = trainer.get("gradient_clip_val")
    if clip is not None and clip > 0:
        raise ConfigError(
            f"trainer.gradient_clip_val={clip!r} is not supported: GRPOModule clips its gradients itself (manual "
            f"optimization); set model.optimizer.max_grad_norm {clip} instead (default 1.0; 0 turns clipping off)"
        )


def device_count(devices: Any, accelerator: Any) -> int:
    """Processes per node that ``trainer.devices`` asks for: an int, a list of ids, ``"2"``, ``"0,1"``; ``auto``
    and -1 are every CUDA device with a GPU accelerator, else 1."""
    if isinstance(devices, list | tuple):
        return max(1, len(devices))
    if isinstance(devices, str):
        text = devices.strip()
        if "," in text:
            return len([d for d in text.split(",") if d.strip()])
        devices = int(text) if text.lstrip("-").isdigit() else -1
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        return devices
    on_gpu = accelerator in (None, "auto", "gpu", "cuda")
    return max(1, torch.cuda.device_count()) if on_gpu and torch.cuda.is_available() else 1


def world_size(trainer: Mapping[str, Any]) -> int:
    """Data-parallel processes of the run: ``trainer.devices`` per node x ``trainer.num_nodes``."""
    nodes = trainer.get("num_nodes") or 1
    return device_count(trainer.get("devices", "auto"), trainer.get("accelerator")) * max(1, int(nodes))
