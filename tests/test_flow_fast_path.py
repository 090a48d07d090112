"""Invariants the fast paths of an MRTR round rely on, which no other test pins."""

from __future__ import annotations

import base64
import dataclasses
import string

import pytest

from mrtr.server import request_state
from mrtr.server.request_state import (
    InvalidRequestState,
    RequestStateKeyRing,
    StateBinding,
    VerifiedState,
    digest_arguments,
    mint_for_flow,
    mint_request_state,
    new_flow_id,
    verify_request_state,
)
from mrtr.server.store import ENTRY_OVERHEAD, MemoryStore

RING = RequestStateKeyRing(b"f" * 32)
BINDING = StateBinding("tools/call", "t", digest_arguments({"a": 1}), "fast", "alice")
# Every character a token body could be spelled with, and some it never is.
ALPHABET = string.ascii_letters + string.digits + "-_+/=. \n!~"


def cause(token: str) -> str:
    try:
        verify_request_state(RING, BINDING, token)
    except InvalidRequestState as exc:
        return exc.cause
    return "ok"


@pytest.mark.parametrize("data_len", [0, 1, 2, 17, 18, 19, 100])
def test_only_the_minted_spelling_verifies(data_len: int) -> None:
    # Canonical spelling is checked without re-encoding: a changed character anywhere is
    # refused, whatever its position and the token's length modulo 4 (the unused low bits
    # of the last character, "+/=" and stray characters all included).
    token = mint_request_state(RING, BINDING, b"d" * data_len, round=1)
    assert cause(token) == "ok"
    body = token[2:]
    for position in range(len(body)):
        for char in ALPHABET:
            if char == body[position]:
                continue
            spelled = token[:2] + body[:position] + char + body[position + 1 :]
            assert cause(spelled) != "ok", (position, char)


def test_the_unused_bits_of_the_last_character_are_refused() -> None:
    for data_len in range(0, 192, 7):
        token = mint_request_state(RING, BINDING, b"x" * data_len, round=1)
        raw = base64.urlsafe_b64decode(token[2:] + "=" * (-len(token[2:]) % 4))
        spare = {1: 4, 2: 2}.get(len(raw) % 3, 0)  # unused bits in the last character
        index = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
        last = index.index(token[-1])
        assert last % (1 << spare) == 0
        for flipped in range(1, 1 << spare):
            odd = token[:-1] + index[last | flipped]
            # The same bytes, spelled another way: decoding alone would accept it.
            assert base64.urlsafe_b64decode(odd[2:] + "=" * (-len(odd[2:]) % 4)) == raw
            assert cause(odd) == "malformed"


def test_padding_and_standard_alphabet_spellings_are_refused() -> None:
    padded = 0
    for data_len in range(0, 400, 50):
        token = mint_request_state(RING, BINDING, b"p" * data_len, round=1)
        body = token[2:]
        if len(body) % 4:
            padded += 1
            assert cause(token + "=" * (-len(body) % 4)) == "malformed"
        standard = body.replace("-", "+").replace("_", "/")
        if standard != body:
            assert cause("2." + standard) == "malformed"
    assert padded


def test_a_new_flow_gets_fresh_random_ids_and_nonces() -> None:
    tokens: set[str] = set()
    flows: set[str] = set()
    nonces: set[bytes] = set()
    for _ in range(200):
        token, flow_id = mint_for_flow(RING, BINDING, b"x", 1, "", 0)
        verified = verify_request_state(RING, BINDING, token)
        assert verified.flow_id == flow_id and len(flow_id) == 32
        raw = base64.urlsafe_b64decode(token[2:] + "=" * (-len(token[2:]) % 4))
        tokens.add(token)
        flows.add(flow_id)
        nonces.add(raw[4:16])
    assert len(tokens) == len(flows) == len(nonces) == 200
    # The flow id and the nonce are distinct slices of the fresh bytes.
    assert all(bytes.fromhex(flow)[:12] not in nonces for flow in flows)


def test_a_flow_keeps_its_id_and_refuses_a_bad_one() -> None:
    flow = new_flow_id()
    token, same = mint_for_flow(RING, BINDING, b"x", 2, flow, 60)
    assert same == flow
    assert verify_request_state(RING, BINDING, token).flow_id == flow
    with pytest.raises(ValueError):
        mint_for_flow(RING, BINDING, b"x", 2, flow.upper(), 60)
    with pytest.raises(ValueError):
        mint_request_state(RING, BINDING, b"x", round=2, flow_id="")


def test_written_out_initialisers_keep_the_dataclass_contract() -> None:
    binding = StateBinding(method="tools/call", target="t", arguments_digest=b"d", audience="a")
    assert binding.principal is None
    assert binding == StateBinding("tools/call", "t", b"d", "a", None)
    assert hash(binding) == hash(StateBinding("tools/call", "t", b"d", "a"))
    assert dataclasses.replace(binding, principal="p").principal == "p"
    with pytest.raises(dataclasses.FrozenInstanceError):
        binding.target = "u"  # type: ignore[misc]
    state = VerifiedState(round=1, expires_at=None, data=b"x")
    assert state.flow_id == ""
    assert state == VerifiedState(1, None, b"x", "")
    assert repr(state) == "VerifiedState(round=1, expires_at=None, data=b'x', flow_id='')"
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.round = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        StateBinding("tools/call", "t")  # type: ignore[call-arg]
    assert [f.name for f in dataclasses.fields(VerifiedState)] == [
        "round",
        "expires_at",
        "data",
        "flow_id",
    ]
    assert request_state.StateBinding.__slots__ == (
        "method",
        "target",
        "arguments_digest",
        "audience",
        "principal",
    )


async def test_memory_store_accounts_each_path_of_a_write() -> None:
    now = [0.0]
    store = MemoryStore(clock=lambda: now[0])

    def cost(key: str, value: bytes) -> int:
        return ENTRY_OVERHEAD + len(key) + len(value)

    assert await store.add("k", b"run", 10)
    assert not await store.add("k", b"other", 10)
    assert store.bytes == cost("k", b"run")
    await store.set("k", b"done!", 10)  # replaces: only the new size counts
    assert store.bytes == cost("k", b"done!") and len(store) == 1
    now[0] = 20.0  # expired: add takes the key again
    assert await store.add("k", b"again", 10)
    assert await store.get("k") == b"again"
    assert store.bytes == cost("k", b"again") and len(store) == 1
    with pytest.raises(TypeError):
        await store.add("v", "text", 10)  # type: ignore[arg-type]
    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            await store.add("t", b"x", ttl)
    assert len(store) == 1
