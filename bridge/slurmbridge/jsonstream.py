"""One list of a JSON answer read as it comes, item by item: slurmrestd's GET /jobs/.

slurmrestd cannot filter jobs (26.05's openapi/slurmctld reads only `update_time` and `flags` for
GET /jobs/), and dumps about 5 KB a job: 100,000 jobs are 500 MB of JSON, 2 GB as Python objects.
So the answer is never held whole: each item of the list named `key` is decoded alone (the
stdlib's C scanner, `raw_decode`) and handed to `keep`, which returns what to keep of it (None:
nothing); the answer's other members (`meta`, `errors`, `warnings`...) are kept as they are, each
at most `max_item` characters. Memory is then what `keep` keeps, plus one item and one read.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
MAX_ITEM = 4 * 1024 * 1024  # characters: a job is some KB; a member or item larger is not slurmrestd's
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class ListStream(Generic[T]):
    """Feed the answer's bytes in order (`feed`), then `close()`: its members, with `key` the
    list of what `keep` kept (absent if the answer has no such list). A malformed or cut answer
    is a ValueError."""

    def __init__(self, key: str, keep: Callable[[Any], T | None], max_item: int = MAX_ITEM) -> None:
        self.key, self.keep, self.max_item = key, keep, max_item
        self.kept: list[T] = []
        self.members: dict[str, Any] = {}
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf, self._at = "", 0
        self._step: Callable[[], bool] = self._open
        self._member = ""
        self._ended = False
        self.found = False  # the list `key` was in the answer

    def feed(self, data: bytes, final: bool = False) -> None:
        self._buf = self._buf[self._at:] + self._text.decode(data, final)
        self._at = 0
        while self._step():
            pass
        if len(self._buf) - self._at > self.max_item:
            raise ValueError(f"an item or member of the answer is longer than {self.max_item} characters")

    def close(self) -> dict[str, Any]:
        self._ended = True
        self.feed(b"", final=True)
        while self._step():
            pass
        if self._step != self._done or self._buf[self._at:].strip():
            raise ValueError("the JSON answer was cut short or is not an object")
        return {**self.members, self.key: self.kept} if self.found else self.members

    # Each step reads what it can and says whether to go on: False waits for more bytes.

    def _char(self) -> str:
        self._at = _SPACE.match(self._buf, self._at).end()  # type: ignore[union-attr]  # always matches
        return self._buf[self._at:self._at + 1]

    def _value(self) -> tuple[bool, Any]:
        """The JSON value at the cursor, if it has all come (a value ending the buffer may be a cut number)."""
        try:
            value, end = _DECODER.raw_decode(self._buf, self._at)
        except json.JSONDecodeError as err:
            if self._ended:
                raise ValueError(f"malformed JSON answer: {err}") from err
            return False, None
        if end == len(self._buf) and not self._ended:
            return False, None
        self._at = end
        return True, value

    def _expect(self, char: str, then: Callable[[], bool]) -> bool:
        found = self._char()
        if not found:
            return False
        if found != char:
            raise ValueError(f"malformed JSON answer: {found!r} where {char!r} was expected")
        self._at += 1
        self._step = then
        return True

    def _open(self) -> bool:
        return self._expect("{", self._first_member)

    def _first_member(self) -> bool:
        found = self._char()
        if found == "}":
            self._at += 1
            self._step = self._done
            return True
        return bool(found) and self._name()

    def _name(self) -> bool:
        complete, name = self._value()
        if not complete:
            return False
        if not isinstance(name, str):
            raise ValueError("malformed JSON answer: a member name that is not a string")
        self._member = name
        self._step = self._colon
        return True

    def _colon(self) -> bool:
        return self._expect(":", self._member_value)

    def _member_value(self) -> bool:
        found = self._char()
        if found == "[" and self._member == self.key:
            self.found = True
            self._at += 1
            self._step = self._first_item
            return True
        complete, value = self._value() if found else (False, None)
        if complete:
            self.members[self._member] = value
            self._step = self._after_member
        return complete

    def _after_member(self) -> bool:
        found = self._char()
        if found == ",":
            self._at += 1
            self._step = self._name_next
            return True
        if found == "}":
            self._at += 1
            self._step = self._done
            return True
        if found:
            raise ValueError(f"malformed JSON answer: {found!r} after a member")
        return False

    def _name_next(self) -> bool:
        return bool(self._char()) and self._name()

    def _first_item(self) -> bool:
        found = self._char()
        if found == "]":
            self._at += 1
            self._step = self._after_member
            return True
        return bool(found) and self._item()

    def _item(self) -> bool:
        if not self._char():
            return False
        complete, value = self._value()
        if complete:
            kept = self.keep(value)
            if kept is not None:
                self.kept.append(kept)
            self._step = self._after_item
        return complete

    def _after_item(self) -> bool:
        found = self._char()
        if found == ",":
            self._at += 1
            self._step = self._item
            return True
        if found == "]":
            self._at += 1
            self._step = self._after_member
            return True
        if found:
            raise ValueError(f"malformed JSON answer: {found!r} after an item of {self.key!r}")
        return False

    def _done(self) -> bool:
        return False
