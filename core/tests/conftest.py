"""pytester runs the conformance suite as a third party's repository would."""

pytest_plugins = ["pytester"]
