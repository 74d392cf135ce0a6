"""Model weights as they enter a site and as nodes hold them: manifests and the rule that checks them."""
