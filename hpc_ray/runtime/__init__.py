"""The runtime: head (control state, scheduler), worker loop, executors, object store."""
