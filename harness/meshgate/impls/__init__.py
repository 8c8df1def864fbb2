"""Implementations under test other than meshgate's own library, each a program that speaks the
meshgate.impl/1 protocol (docs/impl-protocol.md) to meshgate-runner: protocol.py holds the
protocol's messages, torch/ the PyTorch adapter (`python3 -m meshgate.impls.torch`).

These modules run in the implementation's own process, started by the runner; the driver
never imports them. How `--impl` names one and how it is started: meshgate.system.implementations."""
