"""Cuts a streamed answer into phrases to speak while the rest is decoded: sentence and clause ends, never inside a
number or a URL (a boundary is punctuation followed by whitespace), with a minimum length per phrase (a shorter one
for the first clause, which the listener waits for)."""

from __future__ import annotations

SENTENCE_ENDS = ".!?"
WIDE_ENDS = "\u3002\uff01\uff1f"  # CJK full stop, exclamation and question marks: no space follows them
CLAUSE_ENDS = ",;:"
EARLY_ENDS = ",;"  # clause ends cut without waiting for the next character when a word comes before them
MIN_SENTENCE_CHARS = 8  # "1. " or "Dr. " alone is not a phrase
MIN_CLAUSE_CHARS = 24  # a clause is cut only when it is long enough to be worth speaking on its own
MIN_FIRST_CLAUSE_CHARS = 16  # the answer's first clause may be shorter: it is what the user waits for
MAX_PHRASE_CHARS = 240  # past this, cut at the last space (a run-on answer still starts speaking)


class PhraseSplitter:
    """Takes text pieces as they stream; hands back each complete phrase once, and the rest at the end."""

    def __init__(self) -> None:
        self.text = ""
        self.first = True  # no phrase handed out yet

    def feed(self, piece: str) -> list[str]:
        """The phrases the new piece completes."""
        self.text += piece
        phrases: list[str] = []
        while (cut := self._cut()) is not None:
            phrase, self.text = self.text[:cut].strip(), self.text[cut:].lstrip()
            if phrase:
                phrases.append(phrase)
                self.first = False
        return phrases

    def flush(self) -> str | None:
        """What is left once the answer ended (None when nothing)."""
        rest, self.text = self.text.strip(), ""
        return rest or None

    def _cut(self) -> int | None:
        text = self.text
        for index, char in enumerate(text):
            if char == "\n" and text[:index].strip():
                return index + 1
            if char in WIDE_ENDS and len(text[: index + 1].strip()) >= MIN_SENTENCE_CHARS // 2:
                return index + 1
            last = index + 1 == len(text)
            if (last and not _word_comma(text, index)) or (not last and not text[index + 1].isspace()):
                continue  # "3.14", "example.com" and a piece's last character wait for what follows
            length = len(text[: index + 1].strip())
            if char in SENTENCE_ENDS and length >= MIN_SENTENCE_CHARS:
                return index + 1
            if char in CLAUSE_ENDS and length >= (MIN_FIRST_CLAUSE_CHARS if self.first else MIN_CLAUSE_CHARS):
                return index + 1
        if len(text) > MAX_PHRASE_CHARS:
            space = text.rfind(" ", 0, MAX_PHRASE_CHARS)
            return space + 1 if space > 0 else MAX_PHRASE_CHARS
        return None


def _word_comma(text: str, index: int) -> bool:
    """A comma or semicolon right after a letter: a clause end already (no number, URL or abbreviation ends so), so
    the token after it need not be waited for."""
    return text[index] in EARLY_ENDS and index > 0 and text[index - 1].isalpha()
