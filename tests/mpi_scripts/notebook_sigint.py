"""What a Jupyter kernel does around each cell it runs: Python's default SIGINT
handler set first (ipykernel's pre_handler_hook), the one found put back after.
From the second cell on, hpc_ray's handler (a Ctrl-C waits for the end of the
runtime's critical sections) must be back in place while the cell runs."""
import signal

from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()


def run_cell(source):
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = shell.run_cell(source)
    finally:
        signal.signal(signal.SIGINT, saved)
    result.raise_error()


run_cell("import hpc_ray as ray\nray.init(num_cpus=1)")
run_cell("import signal\nfrom hpc_ray.runtime import interrupts\n"
         "second = signal.getsignal(signal.SIGINT) is interrupts._on_sigint\n"
         "x = ray.get(ray.put(41)) + 1")
run_cell("third = signal.getsignal(signal.SIGINT) is interrupts._on_sigint\nray.shutdown()")
print("HANDLER", shell.user_ns["second"], shell.user_ns["third"], shell.user_ns["x"], flush=True)
