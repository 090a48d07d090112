"""The sealed formats pinned by golden values: a `requestState` sealed by one release must open
in the next (a rolling upgrade has both serving one flow), so the binding digest, the question
digest and automatic keys, the state's encoding and the token format must not drift.

The values below were produced once by the code they pin; a change that breaks one of these
tests breaks every flow in flight across an upgrade.
"""

from __future__ import annotations

from mrtr.server._engine.questions import question_digest
from mrtr.server._engine.replay import Replay
from mrtr.server._engine.round_state import RoundState
from mrtr.server.request_state import (
    RequestStateKeyRing,
    StateBinding,
    digest_arguments,
    verify_request_state,
)

SECRET = "golden-secret-of-at-least-32-bytes-0123456789"
ARGUMENTS = {"item": "book", "count": 2, "options": {"gift": True, "note": "\u00e9"}}
ARGUMENTS_DIGEST = (
    b"\xf3sM\xcd\xa6\xa3y\x01\xa4_@=\xa5HR\x86\x1f\xed\x1d\xa8\xaf\xd5\xb3\x08\x8f\xa7\xd0"
    b"\x9fv{\xd9\r"
)
QUESTION = {
    "mode": "form",
    "message": "Ship to which region?",
    "requestedSchema": {"type": "object", "properties": {"region": {"type": "string"}}},
}
QUESTION_DIGEST = "/rDxeyxoHIBPCSZk"
ENCODED = (
    b'{"a":{"elicit-x":["/rDxeyxoHIBPCSZk",{"action":"accept","content":{"region":"eu"}}]},'
    b'"q":{"confirm":["/rDxeyxoHIBPCSZk","elicitation/create"]},"o":{"order-id":"ord-1"},'
    b'"u":"user text"}'
)
# Sealed with SECRET for BINDING, round 2, never expiring.
TOKEN = (
    "2.atwLdlmGu9hJphPBiecKumKuUok6VOiytG-pWZulz_bj_YrI7dgWXhA5dwf7fc7gafusydjnebcEgvdkjE9qnvfU"
    "SE0pa7TlJ4CFpySxArQTRhWzS1geaz7GFquTAjTEN7a7fV7FahkeIgzjL_Y0wPTJQKIWHWw_t6DGnqL2bV96p5eRt"
    "HmJQImN8K0U0fdGD3dX56wngSqA4LmeH2__oYno2cBkBEfgBkJuM_ytEXc_yMHoy0ZxlASnO6idQewTZ99cKV0bII"
    "z45am9QB85JldaQ_671fC19ajtgH0hLeunjWyDB8JEMDCquKAjJNZmVtVIaA-aA9QHirC_rhvGnCvazW1KADn70h6m"
    "_uz3yaOoVK2kdZvQyrB2JAlEH0XZ"
)
FLOW_ID = "f8d3feab9434054f032dd7a56b5fffa0"
BINDING = StateBinding(
    method="tools/call",
    target="order",
    arguments_digest=ARGUMENTS_DIGEST,
    audience="shop",
    principal="alice",
)


def test_the_binding_digest_of_arguments_is_pinned() -> None:
    assert digest_arguments(ARGUMENTS) == ARGUMENTS_DIGEST
    # Key order does not matter: the digest is of canonical JSON.
    assert digest_arguments(dict(reversed(list(ARGUMENTS.items())))) == ARGUMENTS_DIGEST


def test_question_digests_and_automatic_keys_are_pinned() -> None:
    assert question_digest("elicitation/create", QUESTION) == QUESTION_DIGEST
    engine = Replay()
    first = engine.ask("elicitation/create", QUESTION)
    again = engine.ask("elicitation/create", QUESTION)
    sample = engine.ask("sampling/createMessage", {"messages": [], "maxTokens": 10})
    assert (first.key, again.key, sample.key) == (
        "elicit-feb0f17b",
        "elicit-feb0f17b-2",
        "sample-9fe9d980",
    )
    assert first.digest == QUESTION_DIGEST


def test_the_round_state_encoding_is_pinned() -> None:
    state = RoundState(
        2,
        {"elicit-x": [QUESTION_DIGEST, {"action": "accept", "content": {"region": "eu"}}]},
        {"confirm": [QUESTION_DIGEST, "elicitation/create"]},
        {"order-id": "ord-1"},
        "user text",
    )
    assert state.encode() == ENCODED
    back = RoundState.decode(ENCODED, 2, FLOW_ID)
    assert (back.round, back.answers, back.asked, back.once, back.user, back.flow_id) == (
        2,
        state.answers,
        state.asked,
        state.once,
        "user text",
        FLOW_ID,
    )


def test_a_token_sealed_by_an_earlier_build_still_opens() -> None:
    verified = verify_request_state(RequestStateKeyRing(SECRET), BINDING, TOKEN)
    assert (verified.data, verified.round, verified.flow_id) == (ENCODED, 2, FLOW_ID)
    assert verified.expires_at is None
