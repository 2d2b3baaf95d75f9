"""Context fragments: the values, the editing service and the built-ins.

The names of `harness.fragments.editing`, at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.fragments.editing import (
    DEFAULT_PROJECT,
    KINDS,
    TITLE_CHARS,
    AnswersSetsAtOnce,
    Fragment,
    FragmentChange,
    FragmentKind,
    FragmentList,
    FragmentPolicy,
    Fragments,
    FragmentScope,
    ReadsFragmentSets,
    ReadsOneFragment,
    Scope,
    SecretPattern,
    SetsFound,
    SetsNow,
    from_message,
    keeps_fragments,
    overlaid,
    read_sets,
    redact,
    ref_id,
    sets_now_of,
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
