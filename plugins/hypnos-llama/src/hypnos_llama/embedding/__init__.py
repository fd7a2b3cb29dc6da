"""Embedding models on llama.cpp: an offline converter for sentence-transformers BERT models, and the engine."""
