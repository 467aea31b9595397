"""pip install . : builds moe-ep and its Python module with CMake, then packages python/moe_ep.

No registry is needed: `pip install --no-build-isolation .` uses the setuptools already there.
CMake arguments can be added through the CMAKE_ARGS environment variable, e.g.
CMAKE_ARGS="-DMOE_EP_ENABLE_CUDA=OFF" (CPU backend only) or "-DCMAKE_CUDA_ARCHITECTURES=100".
The CUDA backend is built when nvcc and NCCL are found (as in the CMake build).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(self.build_temp).resolve() / "cmake"
        args = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DMOE_EP_BUILD_PYTHON=ON",
            "-DMOE_EP_BUILD_TESTS=OFF",
            "-DMOE_EP_BUILD_TOOLS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if not shutil.which("nvcc") and Path("/usr/local/cuda/bin/nvcc").exists():
            os.environ["PATH"] = "/usr/local/cuda/bin:" + os.environ["PATH"]
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir)] + args)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "moe_ep_python",
                               "-j", jobs])
        built = sorted((build_dir / "python" / "moe_ep").glob("_C*.so"))
        if not built:
            raise RuntimeError(f"moe-ep: the build made no module in {build_dir}/python/moe_ep")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], target)


setup(
    packages=["moe_ep"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("moe_ep._C")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
