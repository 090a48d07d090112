"""The tasks extension on the server (`io.modelcontextprotocol/tasks`, SEP-2663).

`@server.tool(task="optional" | "required" | TaskSettings(...))` lets calls of a tool become
tasks; `ctx.run_as_task()` makes one a task now. `TaskManager` serves `tasks/get`,
`tasks/update` and `tasks/cancel` from the task store; `TaskRun` is one running task.
"""

from .manager import TaskManager
from .record import TaskRecord
from .run import TaskRun
from .settings import TaskSettings, task_settings
from .storage import TaskStore

__all__ = ["TaskManager", "TaskRecord", "TaskRun", "TaskSettings", "TaskStore", "task_settings"]
