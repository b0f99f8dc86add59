"""The one native part: the verbs shim (src/icefabric/native/icefab_verbs.c), built when a C
compiler and the rdma-core headers (Debian/Ubuntu: libibverbs-dev) are present. Without
them the build of this optional extension fails, setuptools warns, and the install goes on:
``icefab agent shim-path`` then says how to build it later."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("icefabric.native.libicefab_verbs",
                             sources=["src/icefabric/native/icefab_verbs.c"],
                             libraries=["dl", "pthread"], extra_compile_args=["-Wall"],
                             optional=True)])
