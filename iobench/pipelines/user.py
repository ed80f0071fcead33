"""The user's own pipeline, `--pipeline FILE.py:FUNC` or `package.module:FUNC` (the contract: docs/pipelines.md).
What the user's code raises is theirs: UserCodeError, with its traceback and the user's file and line."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from iobench.errors import UserCodeError, UserError
from iobench.pipelines import Shape


def resolve(text: str) -> tuple[Callable[..., Any], tuple[str, ...]]:
    """The user's function and the files that are theirs (its module's), from FILE.py:FUNC or package.module:FUNC.
    A file or function not found is one line (UserError); an exception while importing it is the user's."""
    where, _, name = text.rpartition(":")
    what = f"--pipeline {text}"
    if where.endswith(".py"):
        path = os.path.realpath(where)
        if not os.path.isfile(path):
            raise UserError(f"{what}: no such file {where}")
        folder, module_name = os.path.dirname(path), os.path.basename(path)[:-3]
        if folder not in sys.path:  # imported by its name, as the user's own script would: its workers can too
            sys.path.insert(0, folder)
        loaded = sys.modules.get(module_name)
        if loaded is not None and os.path.realpath(getattr(loaded, "__file__", "") or "") != path:
            raise UserError(f"{what}: a module named {module_name} is already imported from {loaded.__file__}: "
                            "rename your file")
    else:
        module_name, path = where, ""
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and module_name.startswith(exc.name):
            raise UserError(f"{what}: no module named {exc.name}") from None
        files = (path or os.path.realpath(getattr(sys.modules.get(module_name), "__file__", "") or ""),)
        raise UserCodeError.of(exc, f"your pipeline's module {where}", files) from exc
    func = getattr(module, name, None)
    if not callable(func):
        raise UserError(f"{what}: {where} has no function {name}")
    return func, (os.path.realpath(module.__file__ or path),)


class UserFeed:
    """One GPU's pipeline made by the user's function, re-iterated each epoch."""

    def __init__(self, text: str, shape: Shape):
        func, self.files = resolve(text)
        self.what = f"your pipeline {text}"
        kwargs: dict[str, Any] = dict(root=str(shape.root), batch_size=shape.batch_size, workers=shape.workers,
                                      seed=shape.seed)
        params = inspect.signature(func).parameters
        self.sharded = shape.world > 1 and (
            {"rank", "world_size"} <= params.keys() or any(p.kind is p.VAR_KEYWORD for p in params.values()))
        if self.sharded:
            kwargs.update(rank=shape.rank, world_size=shape.world)
        try:
            self.made = func(**kwargs)
            iter(self.made)
        except Exception as exc:
            raise self.error(exc) from exc

    def error(self, exc: BaseException) -> UserCodeError:
        return UserCodeError.of(exc, self.what, self.files)

    def batches(self, epoch: int) -> Any:
        return self.made

    def close(self) -> None:
        self.made = None
