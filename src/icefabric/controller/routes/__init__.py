"""One router per resource (fabric, agents, reports, plans, events, views, health)."""
