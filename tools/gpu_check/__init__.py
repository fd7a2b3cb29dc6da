"""The prepared GPU check (`nox -s gpu-prepare`, `nox -s gpu`): what travels to a device machine and what runs there."""
