"""meshgate: the Python driver of meshgate-runner (standard library only)."""

# The one place the version is written: CMakeLists.txt reads it for project(VERSION) and the
# runner, pyproject.toml for the package.
__version__ = "0.1.0"
