"""hypnos-llama: GGUF models on llama.cpp for Hypnos (engine kind `ggml_llama`)."""
