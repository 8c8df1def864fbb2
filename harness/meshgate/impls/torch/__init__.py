"""PyTorch as an implementation under test (`meshgate run --impl torch`): each case kind is
computed by PyTorch's own code (torch.distributed._pycute and _MeshLayout, DeviceMesh on the
fake process group, DTensor redistribution and collectives on a gloo world, addmm/linear), and
meshgate-runner checks the answers exactly as it checks meshgate's library."""
