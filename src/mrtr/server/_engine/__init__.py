"""The MRTR engine, sans-I/O: the rules of a round and nothing that does I/O.

`replay` (the rules header, and `Replay`: one attempt at a request), `rounds` (restore,
verify, redeem, run and seal one round), `questions` (what a handler asks and how an answer
comes back), `once` (the `ctx.once` calls of a run), `round_state` (what the sealed
`requestState` carries between rounds), `outcome` (how a run ends) and `validation`
(pydantic errors as text). The engine imports nothing from the registry, the dispatchers or
the transports: what it needs from above it names as a `Protocol` of its own.
"""
