"""The fleet: a stack's fleet from its config (``source``), validated and planned (``spec``) into plain data
(``plan``: one ``NodeSpec`` per host), the roles' inputs checked against their argument specs (``role_vars``),
and the files that describe a fleet validated without a host (``files``)."""
