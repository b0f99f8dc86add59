"""ice-fabric: an open implementation of ICE (Intelligent Control Ethernet) for RoCEv2 AI
fabrics, with a validated digital twin to evaluate it."""

__version__ = "0.1.0"
