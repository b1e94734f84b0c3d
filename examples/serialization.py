"""The Ray docs' "Serialization in the Object Store" examples (0.2.2 and 0.7).

The docs show three snippets: a list holding the same list twice, a list that
contains itself, and the "last resort" of pickling by hand. Ray 0.2-0.7
serialized through Arrow and got the first two wrong (the copies came back as
distinct lists; the self-containing list raised "This object exceeds the
maximum recursion depth"). hpc_ray serializes with pickle 5, as later Ray does,
so both now come back as Python would have them: the shared list is shared and
the recursive list is recursive. The docs' numpy point stands: an array comes
back from the store as a read-only view of shared memory, not a copy.

    python examples/serialization.py
    mpiexec -n 3 python -m hpc_ray examples/serialization.py

Prints one line per snippet and ends with ``serialization: all 5 checks passed``.
"""
from __future__ import annotations

import argparse
import pickle
import sys

import numpy as np

import hpc_ray as ray


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="accepted for symmetry with "
                        "the other examples; this one is quick anyway")
    parser.parse_args(argv)

    ray.init()
    checks = []

    # --- Notes and limitations: two copies of the same list ------------------------
    l1 = [0]
    l2 = [l1, l1]
    l3 = ray.get(ray.put(l2))

    print(f"l2[0] is l2[1]: {l2[0] is l2[1]}")  # True.
    print(f"l3[0] is l3[1]: {l3[0] is l3[1]}  (Ray 0.2-0.7: False; pickle keeps it True)")
    checks.append(l3 == l2 and l3[0] is l3[1])

    # --- an object that recursively contains itself -------------------------------
    l = []
    l.append(l)

    # Try to put this list that recursively contains itself in the object store.
    back = ray.get(ray.put(l))
    print(f"a list that contains itself comes back as {back!r}; back[0] is back: "
          f"{back[0] is back}")
    checks.append(back[0] is back)

    # --- numpy arrays: read in place from shared memory ---------------------------
    @ray.remote
    def total(arrays):
        return float(sum(a.sum() for a in arrays))

    arrays = [np.arange(100_000, dtype=np.float64) for _ in range(3)]
    arrays_id = ray.put(arrays)
    s = ray.get(total.remote(arrays_id))
    view = ray.get(arrays_id)[0]
    print(f"sum of a list of 3 numpy arrays computed in a task: {s:.0f}; "
          f"the driver's copy is writeable: {view.flags.writeable}")
    checks.append(s == 3 * float(np.arange(100_000).sum()) and not view.flags.writeable)

    # --- Last Resort Workaround ---------------------------------------------------
    @ray.remote
    def f(complicated_object):
        # Deserialize the object manually.
        obj = pickle.loads(complicated_object)
        return "Successfully passed {} into f.".format(obj)

    # Define a complicated object (the 0.2.2 docs: a list holding 1).
    l = []
    l.append(1)

    # Manually serialize the object and pass it in as a string.
    message = ray.get(f.remote(pickle.dumps(l)))  # prints 'Successfully passed [1] into f.'
    print(message)
    checks.append(message == "Successfully passed [1] into f.")

    # Define a complicated object (the 0.7 docs: a list holding itself).
    l = []
    l.append(l)

    # Manually serialize the object and pass it in as a string.
    message = ray.get(f.remote(pickle.dumps(l)))  # prints 'Successfully passed [[...]] into f.'
    print(message)
    checks.append(message == "Successfully passed [[...]] into f.")

    ray.shutdown()
    print(f"serialization: {sum(checks)} of {len(checks)} checks passed"
          if not all(checks) else f"serialization: all {len(checks)} checks passed")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
