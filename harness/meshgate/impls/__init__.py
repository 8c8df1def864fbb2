"""Implementations under test other than meshgate's own library, each speaking the
meshgate.impl/1 protocol (docs/impl-protocol.md) to meshgate-runner."""
