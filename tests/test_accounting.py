"""Request accounting: the manifest's single-pass total equals the plain estimate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import ContextBlock, ContextPolicy, Message, ModelRequest, SystemPart, ToolSchema
from harness.accounting import counted_near_limit, estimate_request, manifest_items

texts = st.text(max_size=300)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(texts, max_size=3),
    st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), texts), max_size=12),
    st.lists(texts, max_size=4),
    st.lists(st.from_regex(r"[a-z]{1,10}", fullmatch=True), max_size=3, unique=True),
)
def test_manifest_total_equals_the_estimate(
    system: list[str], history: list[tuple[str, str]], blocks: list[str], tools: list[str]
) -> None:
    request = ModelRequest(
        model="gpt-4o",
        system=tuple(SystemPart(name=f"p{i}", text=t) for i, t in enumerate(system)),
        history=tuple(
            Message.tool(f"c{i}", text) if role == "tool" else Message(role=role, content=text)  # type: ignore[arg-type]
            for i, (role, text) in enumerate(history)
        ),
        blocks=tuple(ContextBlock.reference(f"b{i}", t) for i, t in enumerate(blocks)),
        tools=tuple(ToolSchema(name=n, description=n * 3) for n in tools),
        policy=ContextPolicy().resolve("gpt-4o"),
    )
    total, items = manifest_items(request)
    assert total == estimate_request(request)
    assert len(items) == len(system) + len(history) + len(blocks) + len(tools)
    assert total >= sum(item.tokens for item in items)


def _far_over(n: int, tag: str) -> ModelRequest:
    history = [Message.user(f"task {tag}")]
    for i in range(n):
        history.append(Message.tool(f"c{i}", f"{tag} line {i} " + "word " * 400, name="shell"))
    model = "gpt-4o"
    return ModelRequest(
        model=model,
        history=tuple(history),
        policy=ContextPolicy().resolve(model),
        input_limit=4_000,
    )


def test_a_request_over_its_limit_for_sure_is_not_counted_exactly() -> None:
    """Issue 26: a floor (bytes over the longest token) over the limit needs no exact count.

    The request is 100x over its limit: its floor says so, and none of its messages reaches
    the exact tokenizer's cache; the total it reports is over the limit and never above the
    exact count. The request is still switched to the exact estimator for what comes next.
    """
    from harness.tokens import exact_for_family, message_key

    request = _far_over(200, "issue-26-a")
    counted, tokens = counted_near_limit(request)
    exact = exact_for_family("o200k")
    assert counted.estimator.exact
    assert not any(message_key(m) in exact.cache.messages for m in request.history)
    assert request.input_limit < tokens <= estimate_request(request, exact)


def test_a_request_over_twice_its_limit_by_estimate_is_not_counted_exactly() -> None:
    """Issue 26: over `FAR_OVER` times its limit by the fast estimate, it is over it.

    Its floor (bytes over the longest token) is within the limit, so the floor cannot say so;
    the estimate can: no message reaches the exact tokenizer's cache, in `count_off_loop`,
    `counted_near_limit` or `history_over`, and the total it reports is over the limit and
    not above the exact count. The request is switched to exact counting for what is kept.
    """
    import anyio

    from harness.accounting import FAR_OVER, count_off_loop, history_over, lower_bound_of
    from harness.request import RunScope
    from harness.tokens import exact_for_family, message_key

    base = _far_over(20, "issue-26-b")
    request = base.replace(input_limit=2_000, run=RunScope())
    est = request.estimator
    floor = lower_bound_of(est)
    assert floor is not None and floor.count_messages(request.history) < request.input_limit
    assert estimate_request(request) > FAR_OVER * request.input_limit
    anyio.run(count_off_loop, request)
    counted, tokens = counted_near_limit(request)
    assert history_over(counted, request.input_limit)
    exact = exact_for_family("o200k")
    assert counted.estimator.exact
    assert not any(message_key(m) in exact.cache.messages for m in request.history)
    assert request.input_limit < tokens <= estimate_request(base, exact)
