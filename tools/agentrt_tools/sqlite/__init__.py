"""sqlite: SQL over a real database file, each statement run as soon as it is written.

See :mod:`agentrt_tools.sqlite.tool` for the tool and :mod:`agentrt_tools.sqlite.names` for the
early table/column checks.
"""

from __future__ import annotations

from agentrt_tools.sqlite.names import Schema, check_prefix, read_schema
from agentrt_tools.sqlite.tool import SqliteTool

__all__ = ["Schema", "SqliteTool", "check_prefix", "read_schema"]
