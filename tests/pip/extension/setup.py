# The probe extension of check_pip.sh, as an extension author writes its setup.py.
import gpusel
from setuptools import Extension, setup

setup(
    name="gpusel_probe",
    ext_modules=[
        Extension(
            "gpusel_probe",
            ["gpusel_probe.cpp"],
            include_dirs=[gpusel.get_include()],
            extra_compile_args=["-std=c++17"],
            language="c++",
        )
    ],
)
