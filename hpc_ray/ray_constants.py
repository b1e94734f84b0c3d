"""The constants of Ray 0.7's ``ray.ray_constants`` that its documentation names."""

#: ``max_reconstructions`` (``max_restarts``) without a limit, as in Ray 0.7; -1
#: means the same.
INFINITE_RECONSTRUCTIONS = 2 ** 30
