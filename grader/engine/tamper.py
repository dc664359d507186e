"""What of the grader's own code, in a rank, the code under test replaced: checked once that code has run, and
reported by the runtime as a fact (`TAMPERED`: "grader.engine.wire.encode was replaced"), never passed silently.

Three things are held, each as it was before any student code ran:
- what the grader installs on torch and the standard library (its spies and wrappers): `install(owner, name, value)`
  sets the attribute and holds it until `forget`, where the grader puts back what it had replaced (and which says
  whether it was still there);
- the grader's own code: every function and class of every grader module loaded, and the functions, properties and
  static or class methods of each class they define. A launcher holds them once it has preloaded them
  (`hold_grader_code`, in preload.import_all), before any rank runs: a forked rank shares those records, where making
  them itself would cost it 15-30 ms (its first write to each page it touches). A rank started without such a
  launcher (torchrun's) holds them when the student's file is first imported (`freeze`);
- the optimizer step hooks registered when the student's file is first imported (`freeze`; torch's global tables,
  which the grader's workers fill), and the tables themselves; a hook the grader removes when done is checked as it is
  removed (RemovableHandle.remove).
`replaced()` lists what no longer is what was held: rebinding a name is found. Its code, like the report's, reads no
global: what it calls is bound when this module loads, before any student code, so rebinding a name it uses (a
builtin, one of this module's) changes nothing in what it finds.

Code that edits these records in place, or a hook's closure, is not found: that is reaching into the runtime's memory,
which nothing inside the rank's own process can rule out (docs/SECURITY.md, "Forged facts").
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any, Final

TAMPERED: Final = "tampered"  # the facts key: one line per thing of the grader's that was replaced
GRADER_PACKAGE = "grader"
OPTIMIZER_HOOKS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")  # in torch.optim.optimizer


def _bind() -> tuple[
    Callable[[Any, str, Any], None],
    Callable[[Any, str], None],
    Callable[[], None],
    Callable[[], None],
    Callable[[], list[str]],
]:
    """install, forget, hold_grader_code, freeze and replaced, as closures over the records and everything they call
    (see above)."""
    from builtins import (  # noqa: UP029 - bound now: a builtin rebound later is not read
        classmethod,
        dict,
        getattr,
        id,
        isinstance,
        list,
        property,
        setattr,
        staticmethod,
        type,
        vars,
    )

    modules, function, module_type, missing = sys.modules, types.FunctionType, types.ModuleType, object()
    package, prefix, optimizer_tables = GRADER_PACKAGE, GRADER_PACKAGE + ".", OPTIMIZER_HOOKS
    installed: dict[tuple[int, str], list[tuple[Any, str, Any, str]]] = {}  # (owner, name) -> installs, the latest last
    frozen: list[tuple[str, Any, dict[str, Any]]] = []  # (label, live namespace, what it held at the freeze)
    hooks: list[tuple[str, dict[Any, Any], dict[Any, Any]]] = []  # (which table, the table, its entries at the freeze)
    lost: list[str] = []  # what was replaced while installed, found when the grader put back the original
    held_modules: dict[str, Any] = {}  # the grader's modules held so far, by name

    def label(owner: Any) -> str:
        if isinstance(owner, module_type):
            return owner.__name__
        if isinstance(owner, type):
            return f"{owner.__module__}.{owner.__qualname__}"
        return type(owner).__name__

    def install(owner: Any, name: str, value: Any) -> None:
        setattr(owner, name, value)
        installed.setdefault((id(owner), name), []).append((owner, name, value, label(owner)))

    def forget(owner: Any, name: str) -> None:
        held = installed.get((id(owner), name))
        if held:
            found = changed(*held.pop())
            if found:
                lost.append(found)  # replaced while it was installed, though the grader now puts it back
            if not held:
                del installed[(id(owner), name)]

    def hold(where: str, namespace: Any, kinds: tuple[type, ...]) -> None:
        frozen.append((where, namespace, {k: v for k, v in list(namespace.items()) if isinstance(v, kinds)}))

    def hold_grader_code() -> None:
        for name, module in list(modules.items()):
            if module is None or name in held_modules or not (name == package or name.startswith(prefix)):
                continue
            held_modules[name] = module
            hold(name, vars(module), (function, type))
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == name:  # a class the module defines
                    hold(f"{name}.{value.__qualname__}", vars(value), (function, property, staticmethod, classmethod))

    def freeze() -> None:
        if not held_modules:  # no launcher held it (torchrun's ranks): listing sys.modules costs a forked rank ~10 ms
            hold_grader_code()
        optimizer, handles = modules.get("torch.optim.optimizer"), modules.get("torch.utils.hooks")
        if hooks or optimizer is None or handles is None:
            return
        for table_name in optimizer_tables:
            table = getattr(optimizer, table_name)
            installed[(id(optimizer), table_name)] = [(optimizer, table_name, table, optimizer.__name__)]
            hooks.append((f"an optimizer step hook of {optimizer.__name__}.{table_name}", table, dict(table)))
        remove = handles.RemovableHandle.remove

        def checked_remove(handle: Any) -> None:
            """A worker removes its hook when done: whether it was still the grader's is checked first."""
            table = handle.hooks_dict_ref()
            for table_label, held, entries in hooks:
                if table is held:
                    line = hook_changed(table_label, table, handle.id, entries.get(handle.id, missing))
                    if line:
                        lost.append(line)
            remove(handle)

        install(handles.RemovableHandle, "remove", checked_remove)

    def hook_changed(table_label: str, table: dict[Any, Any], key: Any, hook: Any) -> str:
        now = table.get(key, missing)
        if hook is missing or now is missing or now is hook:  # not one held, or gone: nothing to say
            return ""
        return f"{table_label} ({getattr(hook, '__qualname__', '?')}) was replaced"

    def changed(owner: Any, name: str, value: Any, owner_label: str) -> str:
        now = vars(owner).get(name, missing)
        return "" if now is value else f"{owner_label}.{name} was {'removed' if now is missing else 'replaced'}"

    def replaced() -> list[str]:
        found = list(lost)
        for installs in list(installed.values()):
            line = changed(*installs[-1])
            if line:
                found.append(line)
        for namespace_label, namespace, held in frozen:
            for name, value in list(held.items()):
                now = namespace.get(name, missing)
                if now is not value:
                    found.append(f"{namespace_label}.{name} was {'removed' if now is missing else 'replaced'}")
        for table_label, table, entries in hooks:
            for key, hook in list(entries.items()):
                line = hook_changed(table_label, table, key, hook)
                if line:
                    found.append(line)
        return found

    return install, forget, hold_grader_code, freeze, replaced


install, forget, hold_grader_code, freeze, replaced = _bind()
