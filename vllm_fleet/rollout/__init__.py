"""Fleet rollouts: the router hook (drain/ready); plan and journal live beside it."""
