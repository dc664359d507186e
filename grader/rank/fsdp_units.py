"""What FSDP2 made of a model, in the names the grader gave its modules and parameters before the student's
code ran: shared by the exercises that inspect FSDP units (16, 18)."""

from __future__ import annotations

from typing import Any, cast

from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._common_utils import clean_tensor_name


class OriginalNames:
    """The names the grader's model gave its modules and parameters before the student's code ran. Found
    again by module identity (fully_shard keeps the module objects, and wrappers of one's own hold them), so
    that any wrapping (checkpoint_wrapper, a module of one's own around a block) reports the same names."""

    def __init__(self, model: nn.Module) -> None:
        self.modules = {id(m): path for path, m in model.named_modules()}
        self._kept = list(model.modules())  # alive, so that no new module is given a freed one's id

    def module(self, path: str, module: nn.Module) -> str:
        return self.modules.get(id(module), clean_tensor_name(path + ".").removesuffix("."))

    def parameters(self, root: nn.Module) -> dict[str, str]:
        """The root's parameter names -> the original names."""
        names = {}
        for path, module in root.named_modules():
            for local, _ in module.named_parameters(recurse=False):
                full = f"{path}.{local}" if path else local
                names[full] = f"{self.modules[id(module)]}.{local}" if id(module) in self.modules else full
        return names


def fsdp_units(model: nn.Module, names: OriginalNames) -> dict[str, dict[str, Any]]:
    """The modules fully_shard made FSDP units, by their paths in the model ("" for the root): the parameters
    each gathers (original names) and the param_dtype of its policy ("None": no casting)."""
    original = names.parameters(model)
    by_id = {id(p): original[n] for n, p in model.named_parameters()}
    units = {}
    for path, module in model.named_modules():
        if isinstance(module, FSDPModule):
            state = module._get_fsdp_state()
            group = state._fsdp_param_group
            policy = getattr(state, "_mp_policy", None)
            units[names.module(path, cast(nn.Module, module))] = {
                "params": [by_id.get(id(p.sharded_param), "?") for p in group.fsdp_params] if group else [],
                "param_dtype": str(getattr(policy, "param_dtype", None)).removeprefix("torch."),
            }
    return units
