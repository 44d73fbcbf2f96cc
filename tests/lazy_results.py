"""Automation API results whose bookkeeping runs only when a test reads it.

``Stack.up`` follows the engine run with three more CLI runs (the stack's outputs masked and in plain text, and the
newest history entry), ``destroy`` and ``refresh`` with one (the history entry); each decrypts the stack's secrets
with the passphrase's key derivation. Measured on this two-core machine during ``make test``: about 1.2 s of CPU per
``up`` and 0.4 s per ``destroy``, some 70 s in all, for results most engine tests never read. Importing this module
makes those results deferred: the same CLI runs happen when a test first reads ``.outputs`` or ``.summary``. Read
them before the stack's next operation (they describe the stack's state when read).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from pulumi import automation as auto


class Deferred:
    """A value fetched on first use, then kept: attribute access, indexing, iteration and comparison go to it."""

    def __init__(self, fetch: Callable[[], Any]):
        self._fetch, self._done, self._value = fetch, False, None

    def resolve(self) -> Any:
        if not self._done:
            self._value, self._done = self._fetch(), True
        return self._value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __getitem__(self, key: Any) -> Any:
        return self.resolve()[key]

    def __contains__(self, key: Any) -> bool:
        return key in self.resolve()

    def __iter__(self):
        return iter(self.resolve())

    def __len__(self) -> int:
        return len(self.resolve())

    def __eq__(self, other: Any) -> bool:
        return self.resolve() == other

    def __repr__(self) -> str:
        return repr(self.resolve())


def _deferring(operation: Callable) -> Callable:
    @functools.wraps(operation)
    def run(self: auto.Stack, *args, **kwargs):
        outputs, info = self.outputs, self.info
        self.outputs = lambda: Deferred(outputs)
        self.info = lambda *a, **kw: Deferred(lambda: info(*a, **kw))
        try:
            return operation(self, *args, **kwargs)
        finally:
            del self.outputs, self.info

    run.deferring = True
    return run


for _name in ("up", "destroy", "refresh"):
    if not getattr(getattr(auto.Stack, _name), "deferring", False):
        setattr(auto.Stack, _name, _deferring(getattr(auto.Stack, _name)))
