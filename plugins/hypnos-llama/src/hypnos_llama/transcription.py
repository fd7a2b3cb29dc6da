"""Transcription on a chat model whose projector takes audio (section 9): the family's instruction, or the prompt."""

from __future__ import annotations

from hypnos.chat import AudioPart, ChatInput, InputMessage, MessagePart, Sampling, TextPart
from hypnos.engine import TranscriptionInput
from hypnos.kit.audio import audio_file

GEMMA_INSTRUCTION = "Transcribe this audio exactly. Output only the transcript."
LANGUAGES = {
    "ar": "Arabic",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "he": "Hebrew",
    "hi": "Hindi",
    "hu": "Hungarian",
    "id": "Indonesian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "nl": "Dutch",
    "no": "Norwegian",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sv": "Swedish",
    "th": "Thai",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "vi": "Vietnamese",
    "zh": "Chinese",
}


def language_name(code: str) -> str:
    """The English name of an ISO 639-1 code; an unknown code is passed as given."""
    return LANGUAGES.get(code.strip().lower(), code)


def is_lfm(architecture: str) -> bool:
    """True for the LFM audio family, which takes its instruction as a system prompt."""
    return architecture.lower().startswith("lfm")


def transcription_chat(architecture: str, job: TranscriptionInput, *, max_tokens: int) -> ChatInput:
    """The chat that transcribes `job` on a model of this architecture, greedy and without thinking.

    LFM-Audio: the system prompt "Perform ASR in <Language>." (or "Perform ASR.") and the audio. Every other family
    (Gemma's convention): the audio followed by "Transcribe this audio exactly. Output only the transcript.", plus
    "The speech is in <Language>." with a language. A prompt replaces the system prompt or the instruction.
    """
    data, filename = audio_file(job)  # a realtime turn's PCM comes in a WAV
    audio = AudioPart(data=data, format=_format(filename))
    messages: list[InputMessage] = []
    parts: list[MessagePart] = [audio]
    if is_lfm(architecture):
        system = job.prompt or (f"Perform ASR in {language_name(job.language)}." if job.language else "Perform ASR.")
        messages.append(InputMessage(role="system", parts=[TextPart(text=system)]))
    else:
        instruction = job.prompt or GEMMA_INSTRUCTION
        if job.language and not job.prompt:
            instruction += f" The speech is in {language_name(job.language)}."
        parts.append(TextPart(text=instruction))
    messages.append(InputMessage(role="user", parts=parts))
    return ChatInput(
        messages=messages,
        max_tokens=max_tokens,
        sampling=Sampling(temperature=0.0, seed=0),
        thinking=False,
        thinking_budget=0,
    )


def _format(filename: str | None) -> str:
    suffix = (filename or "").rsplit(".", 1)[-1].lower() if filename and "." in filename else ""
    return suffix or "wav"
