"""Typed transforms: a kind declared by its producer, a target, and the old string on the wire.

`Transform` is a string with fields: manifests written before transforms were typed load
unchanged, encode to the same bytes, and read with the kind's ``omitted`` again; readers
(Tracing, the context view, the proxy's headers, FragmentEditor) use the fields.
"""

from __future__ import annotations

import copy
import pickle
import uuid
from typing import Final

import msgspec
import pytest

import middleware.stack  # noqa: F401  (declares the default stack's kinds)
from harness.manifest import ContextManifest, Transform, TransformKind, dec_hook, enc_hook
from harness.presend import MAX_TOKENS_CLAMPED
from harness.presend.pairs import PAIR_REPAIR
from middleware.budget_fit import DROPPED_FOR_BUDGET
from middleware.compaction import HISTORY_DROPPED
from middleware.fragment_editor import FRAGMENT_DISABLED, FRAGMENT_PAIR_LEFT_OUT
from providers.proxy_hook import manifest_headers

STORED: Final = (
    b'{"call_id":"c-1","purpose":"agent","model":"openai/gpt-4o","estimated_input_tokens":5120,'
    b'"input_limit":8000,"counting_method":"approximate:o200k","exact":false,"items":[{"kind":'
    b'"system","source_id":"system/base","tokens":40,"placement":"system","revision":null,'
    b'"content_hash":null,"role":null},{"kind":"message","source_id":"history/m-1","tokens":12,'
    b'"placement":"history","revision":null,"content_hash":null,"role":"user"}],"transforms":'
    b'["tool_result_offload:call_1","offload_failed:call_2:disk full",'
    b'"omitted_for_budget:fragment:f-1@2","omitted_for_budget:source/tickets/open",'
    b'"workspace_omitted:workspace/MEMORY.md","workspace_truncated:workspace/AGENTS.md",'
    b'"workspace_missing:workspace/docs/a.md","source_unavailable:source/tickets/:timeout",'
    b'"tool_output_trim:3","tool_args_truncate:1","history_compaction:12",'
    b'"summary_failed:ProviderError","history_dropped:12","pair_repair:orphan:call_9",'
    b'"max_tokens_clamped:4096","overflow_retry:1","fragment_edit:fragment:f-2@1",'
    b'"fragment_disabled:m-7","fragment_pair_left_out:calls of m-8"],"validation":"passed",'
    b'"agent_id":"agent","session_id":"s1","run_id":"r-1","calibration":1.0,"error":null,'
    b'"created_at":1700000000.5}'
)
"""A manifest as `ContextManifest.to_json` wrote it before transforms were typed (commit 6e7fa36),
with a transform of every kind the default stack makes."""

OLD_OMISSIONS: Final = (
    "omitted_for_budget:",
    "workspace_omitted:",
    "source_unavailable:",
    "history_dropped:",
    "fragment_disabled:",
    "fragment_removed:",
    "fragment_pair_left_out:",
)
"""The context view's list of omitting prefixes before the kinds declared it."""


def test_a_stored_manifest_loads_unchanged_and_reads_typed() -> None:
    manifest = ContextManifest.from_json(STORED)
    # the same bytes back, with the fields added since (at the end, at their defaults)
    written = (
        STORED[:-1]
        + b',"cache_break":null,"cache_expected":null,"cache_verdict":null,"usage":null}'
    )
    assert manifest.to_json() == written
    assert msgspec.json.encode(manifest.to_dict()) == written
    assert manifest.usage is None
    packed = msgspec.msgpack.encode(manifest, enc_hook=enc_hook)
    again = msgspec.msgpack.decode(packed, type=ContextManifest, dec_hook=dec_hook)
    assert again == manifest and again.transforms == manifest.transforms
    assert all(type(t) is Transform for t in manifest.transforms)
    dropped, repaired = manifest.transforms[2], manifest.transforms[13]
    assert (dropped.kind, dropped.target, dropped.omitted) == (
        DROPPED_FOR_BUDGET,
        "fragment:f-1@2",
        True,
    )
    assert dropped.kind is DROPPED_FOR_BUDGET
    assert (repaired.kind, repaired.target, repaired.omitted) == (
        PAIR_REPAIR,
        "orphan:call_9",
        False,
    )
    assert [t.omitted for t in manifest.transforms] == [
        t.startswith(OLD_OMISSIONS) for t in manifest.transforms
    ]  # what the context view listed as left out, now declared by each kind


def test_a_transform_is_its_string() -> None:
    made = Transform(HISTORY_DROPPED, 12)
    assert made == "history_dropped:12" and str(made) == "history_dropped:12"
    assert repr(made) == "'history_dropped:12'"
    assert hash(made) == hash("history_dropped:12")
    assert made in {"history_dropped:12"}
    assert Transform(MAX_TOKENS_CLAMPED, "") == "max_tokens_clamped:"  # always kind:target
    assert Transform.parse("static") == "static" and Transform.parse("static").target == ""
    for back in (pickle.loads(pickle.dumps(made)), copy.deepcopy(made)):
        assert type(back) is Transform and back.kind is HISTORY_DROPPED and back.omitted


def test_omitted_is_declared_by_the_kind_not_read_from_the_text() -> None:
    assert not Transform.parse("tool_result_offload:call_dropbox_omit").omitted
    assert Transform(FRAGMENT_PAIR_LEFT_OUT, "calls of m-1").omitted
    with pytest.raises(ValueError, match="declared with omitted=True"):
        TransformKind("history_dropped")
    assert TransformKind("history_dropped", omitted=True) is HISTORY_DROPPED
    for bad in ("", "a:b"):
        with pytest.raises(ValueError, match="without ':'"):
            TransformKind(bad)


def test_a_kind_declared_after_its_transform_was_read_is_found() -> None:
    name = f"test_late_{uuid.uuid4().hex}"
    read = Transform.parse(f"{name}:x")
    assert not read.omitted and not read.kind.declared
    late = TransformKind(name, omitted=True)
    assert read.kind is late and read.omitted


def test_a_manifest_given_strings_holds_transforms() -> None:
    manifest = ContextManifest(
        call_id="c",
        purpose="agent",
        model="m",
        estimated_input_tokens=1,
        input_limit=2,
        counting_method="approximate:o200k",
        exact=False,
        transforms=("fragment_disabled:m-1",),  # type: ignore[arg-type]  # as untyped code does
    )
    (transform,) = manifest.transforms
    assert type(transform) is Transform and transform.kind is FRAGMENT_DISABLED


def test_the_proxy_headers_are_unchanged_for_the_proxy_stack_s_transforms() -> None:
    """The default stack in a proxy, without fragments or sources, omits what it did before.

    The expected headers are what `manifest_headers` returned before transforms were typed.
    """
    stored = ContextManifest.from_json(STORED)
    proxied = msgspec.structs.replace(
        stored,
        transforms=tuple(
            t for t in stored.transforms if not t.startswith(("source_unavailable:", "fragment_"))
        ),
    )
    assert manifest_headers(proxied) == {
        "x-harness-estimated-tokens": "5120",
        "x-harness-input-limit": "8000",
        "x-harness-validation": "passed",
        "x-harness-transforms": '["tool_result_offload:call_1","offload_failed:call_2:disk full",'
        '"omitted_for_budget:fragment:f-1@2","omitted_for_budget:source/tickets/open",'
        '"workspace_omitted:workspace/MEMORY.md","workspace_truncated:workspace/AGENTS.md",'
        '"workspace_missing:workspace/docs/a.md","tool_output_trim:3","tool_args_truncate:1",'
        '"history_compaction:12","summary_failed:ProviderError","history_dropped:12",'
        '"pair_repair:orphan:call_9","max_tokens_clamped:4096","overflow_retry:1"]',
        "x-harness-omitted": '["omitted_for_budget:fragment:f-1@2",'
        '"omitted_for_budget:source/tickets/open","workspace_omitted:workspace/MEMORY.md",'
        '"history_dropped:12"]',
        "x-harness-call-id": "c-1",
        "x-harness-cache-break": "none",
        "x-harness-cache-expected": "unknown",  # stored before it was recorded
    }
    # What a source or a fragment left out is an omission too (the substring test missed it).
    omitted = msgspec.json.decode(manifest_headers(stored)["x-harness-omitted"])
    assert omitted == [t for t in stored.transforms if t.startswith(OLD_OMISSIONS)]
