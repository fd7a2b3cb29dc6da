"""The `gliner` entry point: the engine kind and the /v1/entities route; cheap to import."""
