"""Context fragments: the values, the editing service and the built-ins.

The names of `harness.fragments.model` (the values) and `harness.fragments.editing` (the
service), at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.fragments.editing import (
    AnswersSetsAtOnce,
    Fragments,
    ReadsFragmentSets,
    ReadsOneFragment,
    SecretPattern,
    keeps_fragments,
    read_sets,
    redact,
    sets_now_of,
)
from harness.fragments.model import (
    DEFAULT_PROJECT,
    KINDS,
    TITLE_CHARS,
    Fragment,
    FragmentChange,
    FragmentKind,
    FragmentList,
    FragmentPolicy,
    FragmentScope,
    Scope,
    SetsFound,
    SetsNow,
    from_message,
    overlaid,
    ref_id,
)

__all__ = [
    "DEFAULT_PROJECT",
    "KINDS",
    "TITLE_CHARS",
    "AnswersSetsAtOnce",
    "Fragment",
    "FragmentChange",
    "FragmentKind",
    "FragmentList",
    "FragmentPolicy",
    "FragmentScope",
    "Fragments",
    "ReadsFragmentSets",
    "ReadsOneFragment",
    "Scope",
    "SecretPattern",
    "SetsFound",
    "SetsNow",
    "from_message",
    "keeps_fragments",
    "overlaid",
    "read_sets",
    "redact",
    "ref_id",
    "sets_now_of",
]
