"""Change notifications for `subscriptions/listen` streams.

A `SubscriptionHub` holds the open listen streams of one server and fans each change out to
the streams that opted in. Rules:

1. The first message of a stream is `notifications/subscriptions/acknowledged`, carrying the
   part of the client's filter the server honours (types whose capability it advertises).
   Nothing is sent on a stream before it.
2. Every message of a stream carries `_meta["io.modelcontextprotocol/subscriptionId"]`, the
   JSON-RPC id of the `subscriptions/listen` request.
3. Changes are "look again" signals, so a stream that has not yet sent the last one gets each
   pending change once: memory per stream is bounded by its filter, however fast changes come
   and however slow the client reads. A task's state is one pending message per task (the
   newest). A task's log and progress messages each count, so a stream queues at most
   `max_messages` of them and `max_bytes` of their JSON: past either the oldest are dropped,
   and before the rest the stream sends a `notifications/message` (level "warning", logger
   "mrtr") saying how many it dropped.
4. A stream ends when its request is cancelled (on HTTP, the client closing the response
   stream) or when the server closes the hub; then the request gets its graceful result.
5. Publishing never waits: it is safe from any code running on the server's event loop.
6. Legacy sessions attached to the hub (`attach`) get the same changes as plain legacy
   notifications (`notifications/tools/list_changed`, ...; `notifications/resources/updated`
   for the URIs the session subscribed to with `resources/subscribe`), on the session's own
   channel, once it sent `notifications/initialized`. Each send runs in a task of its own
   (rule 5); a send that fails is logged and the session stays attached (the transport
   detaches it when it ends).
7. With a `Broker` (`ServerOptions.broker`), every change is also published on the server's
   channel, and changes published by other instances are delivered here as if raised here.
   Each message carries its instance's id and a sequence number: a hub drops its own
   publications (already delivered when raised) and anything not newer than the last it
   took from that instance, so every change reaches each instance exactly once, in the order
   its instance raised them. Publishing starts with `start()` (the server entering
   `running()`); changes raised before that are delivered here only.
8. The same channel carries "answers arrived" signals of tasks (`task_answered`): another
   instance's signal calls `on_task_answered` with the task id, and a gap calls it with None
   (any task may have been answered meanwhile).
9. A stream follows at most `Budgets.subscriptions` resources, each URI at most
   `subscription_uri_bytes` long and all at most `subscription_bytes`, as a legacy session
   does: a filter past them is refused (-32602, `data.reason` "budget_exceeded").
10. A holder (`budgets.holder`) has at most `Budgets.streams_per_principal` streams open here,
    and the hub at most `Budgets.streams`: a stream past either is refused the same way.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

from ..protocol import jsonrpc
from ..protocol import meta as meta_keys
from ..protocol.errors import INVALID_REQUEST, McpError, invalid_params
from .budgets import BUDGET_EXCEEDED, LOCAL_HOLDER, Budgets, refusal

if TYPE_CHECKING:
    from .session import LegacySession
    from .store import Broker, Unsubscribe

logger = logging.getLogger("mrtr.server")

TOOLS_LIST_CHANGED = "toolsListChanged"
PROMPTS_LIST_CHANGED = "promptsListChanged"
RESOURCES_LIST_CHANGED = "resourcesListChanged"
RESOURCE_SUBSCRIPTIONS = "resourceSubscriptions"
TASK_IDS = "taskIds"  # the tasks extension: `notifications/tasks` for these task ids

ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
_LIST_CHANGED = {
    TOOLS_LIST_CHANGED: "notifications/tools/list_changed",
    PROMPTS_LIST_CHANGED: "notifications/prompts/list_changed",
    RESOURCES_LIST_CHANGED: "notifications/resources/list_changed",
}
RESOURCE_UPDATED = "notifications/resources/updated"
TASK_STATUS = "notifications/tasks"

Notify = Callable[[dict[str, Any]], Awaitable[None]]

_STREAM_ADVICE: Final = "close one of your subscriptions/listen streams first"
# Instances whose last sequence number a hub remembers (rule 7): restarts make new ones.
_KNOWN_ORIGINS: Final = 1024


@dataclass(frozen=True, slots=True)
class SubscriptionFilter:
    """What one stream opted in to (`SubscriptionFilter` on the wire)."""

    lists: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> SubscriptionFilter:
        """Read `params.notifications`, raising -32602 for a malformed one."""
        raw = params.get("notifications")
        if not isinstance(raw, dict):
            raise invalid_params(
                'subscriptions/listen needs "notifications", an object saying what to receive '
                f"({', '.join([*_LIST_CHANGED, RESOURCE_SUBSCRIPTIONS])})"
            )
        lists = set()
        for key in _LIST_CHANGED:
            value = raw.get(key)
            if value is None:
                continue
            if not isinstance(value, bool):
                raise invalid_params(f'"notifications.{key}" must be a boolean')
            if value:
                lists.add(key)
        uris = raw.get(RESOURCE_SUBSCRIPTIONS)
        if uris is None:
            uris = []
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            raise invalid_params(
                f'"notifications.{RESOURCE_SUBSCRIPTIONS}" must be a list of resource URIs'
            )
        task_ids = raw.get(TASK_IDS)
        if task_ids is None:
            task_ids = []
        if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
            raise invalid_params(f'"notifications.{TASK_IDS}" must be a list of task ids')
        return cls(frozenset(lists), frozenset(uris), frozenset(task_ids))

    def honoured(
        self, supported: frozenset[str], tasks: frozenset[str] = frozenset()
    ) -> SubscriptionFilter:
        """The part of this filter that names only types in `supported` (and of its task
        ids, those in `tasks`)."""
        resources = self.resources if RESOURCE_SUBSCRIPTIONS in supported else frozenset()
        return SubscriptionFilter(self.lists & supported, resources, self.tasks & tasks)

    def to_wire(self) -> dict[str, Any]:
        """The filter as the acknowledgement states it."""
        wire: dict[str, Any] = {key: True for key in _LIST_CHANGED if key in self.lists}
        if self.resources:
            wire[RESOURCE_SUBSCRIPTIONS] = sorted(self.resources)
        if self.tasks:
            wire[TASK_IDS] = sorted(self.tasks)
        return wire


class _Stream:
    """One open listen stream: its filter and the changes it has yet to send."""

    __slots__ = (
        "closing",
        "droppable",
        "droppable_bytes",
        "dropped",
        "filter",
        "meta",
        "pending",
        "wake",
    )

    def __init__(self, subscription_id: jsonrpc.RequestId, filter: SubscriptionFilter) -> None:
        self.filter = filter
        self.meta = {meta_keys.SUBSCRIPTION_ID: subscription_id}
        self.pending: dict[str, dict[str, Any]] = {}
        self.wake = asyncio.Event()
        self.closing = False
        #: The pending log and progress messages, oldest first, with their sizes (rule 3).
        self.droppable: deque[tuple[str, int]] = deque()
        self.droppable_bytes = 0
        #: How many were dropped since the stream last sent.
        self.dropped = 0

    def queue(self, key: str, message: dict[str, Any], max_messages: int, max_bytes: int) -> None:
        """Queue a log or progress message, dropping the oldest past the bounds (rule 3)."""
        size = len(orjson.dumps(message))
        self.pending[key] = message
        self.droppable.append((key, size))
        self.droppable_bytes += size
        while self.droppable and (
            len(self.droppable) > max_messages or self.droppable_bytes > max_bytes
        ):
            oldest, oldest_size = self.droppable.popleft()
            self.droppable_bytes -= oldest_size
            if self.pending.pop(oldest, None) is not None:
                self.dropped += 1
        self.wake.set()

    def take(self) -> list[dict[str, Any]]:
        """Everything pending, oldest first, after the note of what was dropped."""
        batch = list(self.pending.values())
        self.pending.clear()
        self.droppable.clear()
        self.droppable_bytes = 0
        if self.dropped:
            note = (
                f"{self.dropped} log and progress notifications of tasks were dropped: this "
                "stream's reader fell behind"
            )
            params = {"level": "warning", "logger": "mrtr", "data": note, "_meta": self.meta}
            batch.insert(0, jsonrpc.notification("notifications/message", params))
            self.dropped = 0
        return batch

    def replace(self, key: str, message: dict[str, Any]) -> None:
        """Queue `message` under `key`, replacing one still pending there (a task's state:
        only the newest matters)."""
        self.pending[key] = message
        self.wake.set()

    def offer(self, key: str, method: str, extra: dict[str, Any] | None = None) -> None:
        if key not in self.pending:
            params: dict[str, Any] = {"_meta": self.meta}
            if extra:
                params.update(extra)
            self.pending[key] = jsonrpc.notification(method, params)
            self.wake.set()


class SubscriptionHub:
    """The open `subscriptions/listen` streams of one server (see the rules above)."""

    def __init__(
        self,
        broker: Broker | None = None,
        channel: str = "mrtr/changes",
        *,
        budgets: Budgets | None = None,
    ) -> None:
        """`broker` and `channel`: where changes are shared with other instances (rule 7).
        `budgets`: what one stream may follow and queue (rules 3 and 9)."""
        self.budgets = budgets = budgets if budgets is not None else Budgets()
        self.max_messages = budgets.stream_messages
        self.max_bytes = budgets.stream_bytes
        self._numbers = itertools.count()
        # Open streams by holder (rule 10).
        self._held: dict[str, int] = {}
        self._streams: set[_Stream] = set()
        self._sessions: set[LegacySession] = set()
        self._sending: set[asyncio.Future[None]] = set()
        self._broker = broker
        self.channel = channel
        self.instance = uuid.uuid4().hex
        self._sequence = 0
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._started = 0
        self._unsubscribe: Unsubscribe | None = None
        self._start_lock: asyncio.Lock | None = None
        #: Called with a task id when another instance stored answers for it (rule 8).
        self.on_task_answered: Callable[[str | None], None] | None = None

    def __len__(self) -> int:
        return len(self._streams)

    @property
    def sharing(self) -> bool:
        """Whether changes of other instances reach this hub (a broker, and started)."""
        return self._broker is not None and self._started > 0

    def attach(self, session: LegacySession) -> None:
        """Let a legacy session receive changes (rule 6)."""
        self._sessions.add(session)

    def detach(self, session: LegacySession) -> None:
        """Stop sending changes to a legacy session."""
        self._sessions.discard(session)

    async def start(self) -> None:
        """Start sharing changes through the broker (nested calls share one subscription)."""
        if self._broker is None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started == 0:
                self._unsubscribe = await self._broker.subscribe(
                    self.channel, self._received, self._missed
                )
            self._started += 1

    async def stop(self) -> None:
        """Undo one `start()`; the last one ends the subscription."""
        if self._broker is None or self._start_lock is None or self._started == 0:
            return
        async with self._start_lock:
            self._started -= 1
            if self._started == 0 and self._unsubscribe is not None:
                unsubscribe, self._unsubscribe = self._unsubscribe, None
                await unsubscribe()

    def _publish(self, change: dict[str, Any]) -> None:
        broker = self._broker
        if broker is None or self._started == 0:
            return
        self._sequence += 1
        change["o"] = self.instance
        change["n"] = self._sequence
        try:
            broker.publish(self.channel, orjson.dumps(change))
        except Exception:
            logger.exception("could not publish a change to other instances")

    def _missed(self) -> None:
        """The broker lost changes for a while (rule 7): any list may have changed, so each
        kind is announced here once."""
        for kind in _LIST_CHANGED:
            self._deliver_list_changed(kind)
        if self.on_task_answered is not None:
            self.on_task_answered(None)

    def _received(self, message: bytes) -> None:
        """Deliver a change the broker brought, once per instance and in order (rule 7)."""
        try:
            change = orjson.loads(message)
            origin, number = change["o"], change["n"]
            kind, uri, task = change.get("k"), change.get("u"), change.get("t")
            answered = change.get("w")
            valid = (
                isinstance(origin, str)
                and type(number) is int
                and (
                    kind in _LIST_CHANGED
                    or (kind is None and isinstance(uri, str))
                    or (isinstance(task, str) and isinstance(change.get("m"), dict))
                    or isinstance(answered, str)
                )
            )
        except (orjson.JSONDecodeError, KeyError, TypeError):
            valid = False
        if not valid:
            logger.warning("ignored a malformed change message on %s", self.channel)
            return
        if origin == self.instance:
            return
        last = self._seen.get(origin)
        if last is not None and number <= last:
            return
        self._seen[origin] = number
        self._seen.move_to_end(origin)
        if len(self._seen) > _KNOWN_ORIGINS:
            self._seen.popitem(last=False)
        if isinstance(answered, str):
            if self.on_task_answered is not None:
                self.on_task_answered(answered)
        elif task is not None:
            self._deliver_task(task, change["m"], change.get("s") is True)
        elif kind is not None:
            self._deliver_list_changed(kind)
        else:
            self._deliver_resource_updated(uri)

    def list_changed(self, kind: str) -> None:
        """Announce that a list changed: `kind` is `toolsListChanged`, `promptsListChanged` or
        `resourcesListChanged`."""
        self._deliver_list_changed(kind)
        if self._broker is not None:
            self._publish({"k": kind})

    def resource_updated(self, uri: str) -> None:
        """Announce that the resource at `uri` changed."""
        self._deliver_resource_updated(uri)
        if self._broker is not None:
            self._publish({"u": uri})

    def task_changed(self, task_id: str, detailed: dict[str, Any]) -> None:
        """Announce a task's new state (`notifications/tasks` with its `DetailedTask`)."""
        message = jsonrpc.notification(TASK_STATUS, detailed)
        self._deliver_task(task_id, message, True)
        if self._broker is not None:
            self._publish({"t": task_id, "m": message, "s": True})

    def task_message(self, task_id: str, message: dict[str, Any]) -> None:
        """Send a log or progress notification of a task's handler to its listeners."""
        self._deliver_task(task_id, message, False)
        if self._broker is not None:
            self._publish({"t": task_id, "m": message})

    def task_answered(self, task_id: str) -> None:
        """Tell the other instances that answers for `task_id` were stored (rule 8)."""
        if self._broker is not None:
            self._publish({"w": task_id})

    def _deliver_task(self, task_id: str, message: dict[str, Any], status: bool) -> None:
        for stream in self._streams:
            if task_id in stream.filter.tasks:
                params = dict(message.get("params") or {})
                params["_meta"] = {**(params.get("_meta") or {}), **stream.meta}
                sent = {**message, "params": params}
                if status:
                    stream.replace("task:" + task_id, sent)
                else:  # every log line and progress step counts: never merged
                    # A number, not id(): a dropped message's id may be reused at once.
                    key = f"task-message:{next(self._numbers)}"
                    stream.queue(key, sent, self.max_messages, self.max_bytes)

    def _deliver_list_changed(self, kind: str) -> None:
        method = _LIST_CHANGED[kind]
        for stream in self._streams:
            if kind in stream.filter.lists:
                stream.offer(kind, method)
        if self._sessions:
            self._to_sessions(jsonrpc.notification(method), None)

    def _deliver_resource_updated(self, uri: str) -> None:
        for stream in self._streams:
            if uri in stream.filter.resources:
                stream.offer("updated:" + uri, RESOURCE_UPDATED, {"uri": uri})
        if self._sessions:
            self._to_sessions(jsonrpc.notification(RESOURCE_UPDATED, {"uri": uri}), uri)

    def _to_sessions(self, message: dict[str, Any], uri: str | None) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving: no session can be listening
        for session in self._sessions:
            send = session.send
            if send is None or session.closed or not session.initialized:
                continue
            if uri is not None and uri not in session.subscriptions:
                continue
            task = asyncio.ensure_future(send(message), loop=loop)
            self._sending.add(task)
            task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Future[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("could not send a change to a legacy session: %s", task.exception())

    def close(self) -> None:
        """End every open stream gracefully (each listen request gets its result)."""
        for stream in self._streams:
            stream.closing = True
            stream.wake.set()

    def _check(self, uris: frozenset[str]) -> None:
        """Rule 9: a stream follows resources within the subscription budgets."""
        budgets = self.budgets
        if len(uris) > budgets.subscriptions:
            raise invalid_params(
                f"subscriptions/listen: {len(uris)} resources asked for, more than the "
                f"{budgets.subscriptions} one stream may follow",
                {"reason": BUDGET_EXCEEDED, "budget": "subscriptions",
                 "limit": budgets.subscriptions},
            )  # fmt: skip
        total = 0
        for uri in uris:
            size = len(uri.encode("utf-8", "surrogatepass"))
            if size > budgets.subscription_uri_bytes:
                raise invalid_params(
                    f"subscriptions/listen: a resource URI is {size} bytes long, longer than "
                    f"the {budgets.subscription_uri_bytes} a stream may follow",
                    {"reason": BUDGET_EXCEEDED, "budget": "subscription URI bytes",
                     "limit": budgets.subscription_uri_bytes},
                )  # fmt: skip
            total += size
        if total > budgets.subscription_bytes:
            raise invalid_params(
                f"subscriptions/listen: the resource URIs take {total} bytes, more than the "
                f"{budgets.subscription_bytes} one stream may follow",
                {"reason": BUDGET_EXCEEDED, "budget": "subscription bytes",
                 "limit": budgets.subscription_bytes},
            )  # fmt: skip

    async def listen(
        self,
        request_id: jsonrpc.RequestId,
        params: Mapping[str, Any],
        notify: Notify | None,
        supported: frozenset[str],
        tasks: frozenset[str] = frozenset(),
        holder: str = LOCAL_HOLDER,
    ) -> dict[str, Any]:
        """Serve one `subscriptions/listen` request until it is cancelled or the hub closes;
        returns the graceful-closure result. `tasks`: the task ids the caller may follow;
        `holder`: whom the stream counts against (`budgets.holder`, rule 10)."""
        if notify is None:
            raise McpError(
                INVALID_REQUEST,
                "subscriptions/listen needs a transport that streams notifications",
            )
        wanted = SubscriptionFilter.from_params(params)
        self._check(wanted.resources)
        budgets = self.budgets
        if self._held.get(holder, 0) >= budgets.streams_per_principal:
            raise refusal(
                "listen streams", budgets.streams_per_principal, "principal", _STREAM_ADVICE
            )
        if len(self._streams) >= budgets.streams:
            raise refusal("listen streams", budgets.streams, "total", "retry later")
        stream = _Stream(request_id, wanted.honoured(supported, tasks))
        self._streams.add(stream)
        self._held[holder] = self._held.get(holder, 0) + 1
        try:
            await notify(
                jsonrpc.notification(
                    ACKNOWLEDGED, {"_meta": stream.meta, "notifications": stream.filter.to_wire()}
                )
            )
            while not stream.closing:
                await stream.wake.wait()
                stream.wake.clear()
                while stream.pending and not stream.closing:
                    for message in stream.take():
                        await notify(message)
        finally:
            self._streams.discard(stream)
            left = self._held[holder] - 1
            if left:
                self._held[holder] = left
            else:
                del self._held[holder]
        return {"_meta": dict(stream.meta)}
