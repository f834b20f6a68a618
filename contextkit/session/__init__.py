"""Sessions: the context of one conversation or agent run across turns (see ``docs/sessions.md``)."""

from contextkit.assembly._turns import ToolCall, Turn
from contextkit.session._session import Session, SessionOptions, SessionResult
from contextkit.session._validate import check_messages, validate_messages

__all__ = ["Session", "SessionOptions", "SessionResult", "ToolCall", "Turn", "check_messages", "validate_messages"]
