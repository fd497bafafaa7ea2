"""CDK stacks, one per lifecycle: results data that must survive; the control plane."""
