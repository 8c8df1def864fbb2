"""meshgate: the Python driver of meshgate-runner.

The driver itself runs on the standard library alone. Two parts of the package need more, and
import it only when they are used: validating a document against the shipped JSON Schemas
(meshgate.core.schema) needs jsonschema, and the PyTorch implementation under test
(meshgate.impls.torch) needs torch."""

# The one place the version is written: CMakeLists.txt reads it for project(VERSION) and the
# runner, pyproject.toml for the package.
__version__ = "0.1.0"
