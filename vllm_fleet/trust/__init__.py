"""What someone else wrote or a node sends, met at the boundary: values checked by where they end up (profile,
unit, ssh, shell), YAML read bounded and strict, node reads with deadlines and size caps, node text shown as data.
The bottom layer: no domain knowledge, nothing above it imported (docs/security.md)."""
