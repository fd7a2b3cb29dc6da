"""How large a chat prompt is: whether it renders inline on the event loop, and the context it needs."""

from __future__ import annotations

from hypnos.chat import ChatInput

NUM_CTX_FLOOR = 2048
TOKENS_PER_IMAGE = 576
TOKENS_PER_AUDIO = 1024
# A prompt this short (characters of text, no tools) renders and tokenizes on the event loop: well under a
# millisecond, less than a hop to a worker thread and back; a longer one goes to a thread.
INLINE_PROMPT_CHARS = 4096


def short_prompt(request: ChatInput) -> bool:
    """True for a conversation without tools of at most INLINE_PROMPT_CHARS characters of text."""
    if request.tools:
        return False
    total = 0
    for message in request.messages:
        total += len(message.text())
        if total > INLINE_PROMPT_CHARS:
            return False
    return True


def estimate_num_ctx(prompt_tokens: int, max_tokens: int, images: int = 0, audios: int = 0) -> int:
    """The context a request needs when num_ctx is unset: prompt, media and generation, at least 2048."""
    return max(NUM_CTX_FLOOR, prompt_tokens + max_tokens + TOKENS_PER_IMAGE * images + TOKENS_PER_AUDIO * audios)
