"""The ICE host agent: enrols, reports communicators, applies plans through an actuator,
and runs the end-side autonomous rules. Talks to the controller only through
:mod:`icefabric.schemas_service` messages over HTTP."""
