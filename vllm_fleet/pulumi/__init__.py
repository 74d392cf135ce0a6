"""The Pulumi program: one GpuNode component per host, rolled out in batches."""
