"""Running the deploy tools: Ansible through ansible-runner in a private dir (``ansible``, ``private_dir``) and
the locally built Pulumi engine, offline (``engine``)."""
