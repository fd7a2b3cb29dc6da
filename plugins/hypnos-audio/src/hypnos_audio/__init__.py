"""Hypnos audio plugin: speech out with Kokoro-82M on ONNX Runtime, speech in with whisper on faster-whisper."""
