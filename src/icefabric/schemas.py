"""Wire models shared by controller, agents and collectors (pydantic, versioned)."""
