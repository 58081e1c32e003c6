"""A griffe extension for the docs build: docstrings written for Sphinx and
doctest, rendered as Markdown.

recrawl's docstrings name other objects the Sphinx way (``:class:`Engine```,
``:func:`~recrawl.plan.freshness.optimal_allocation```, ``:mod:`.writer```).
Markdown does not know these roles, so they would render as literal text. This
extension rewrites each one into an *optional* mkdocs-autorefs reference: a
link when the target is rendered somewhere in the site, plain code when it is
not (a builtin, an excluded module), never a warning under ``--strict``.

It also fences doctest blocks (``>>>`` lines and their output, up to a blank
line) that stand outside a numpydoc Examples section, so Markdown reads their
output (``[None, 'gone']``) as code rather than as reference links.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|mod|meth|data|attr|exc|obj|const|type):"
    r"`(?P<tilde>~?)(?P<target>[^`<>]+)`"
)


def _package_of(obj: griffe.Object) -> str:
    module = obj.module
    return module.path if module.is_package else module.path.rpartition(".")[0]


def _identifier(obj: griffe.Object, target: str) -> str:
    target = target.strip().removesuffix("()")
    if target.startswith("."):
        base = _package_of(obj)
        stripped = target.lstrip(".")
        for _ in range(len(target) - len(stripped) - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{stripped}" if base else stripped
    if target.split(".", 1)[0] in ("recrawl", "numpy", "builtins"):
        return target
    return f"{obj.module.path}.{target}"


def convert(obj: griffe.Object, text: str) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs reference."""

    def one(m: re.Match[str]) -> str:
        target = m["target"].strip()
        title = target.removesuffix("()").rsplit(".", 1)[-1] if m["tilde"] else target
        ident = _identifier(obj, target)
        return f'<autoref identifier="{ident}" optional><code>{title}</code></autoref>'

    return _ROLE.sub(one, text)


def fence_doctests(text: str) -> str:
    """``text`` with each doctest block at the left margin in a ``pycon`` fence."""
    out: list[str] = []
    in_doctest = in_fence = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        elif not in_doctest and not in_fence and (line.startswith(">>> ") or line == ">>>"):
            if out and out[-1].strip():
                out.append("")
            out.append("```pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles and fence doctests in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is None:
            return
        value = doc.value
        if ":" in value and "`" in value:
            value = convert(obj, value)
        if ">>>" in value:
            value = fence_doctests(value)
        doc.value = value
