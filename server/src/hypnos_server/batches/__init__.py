"""The OpenAI Files and Batches APIs: uploaded JSONL files of requests run line by line in the capacity interactive
requests leave idle, with durable progress."""
