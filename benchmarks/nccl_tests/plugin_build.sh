#!/usr/bin/env bash
# Sourced by the GPU scripts after their set-up: builds the plugin library (Release, no Python extension,
# no tests) into /tmp/acbuild and points the package at it (AUTOCCL_LIB_DIR, PYTHONPATH). Returns non-zero,
# with the end of the build log, when the build fails.
if ! { cmake -S . -B /tmp/acbuild -G Ninja -DCMAKE_BUILD_TYPE=Release -DAUTOCCL_BUILD_PYTHON=OFF \
         -DAUTOCCL_BUILD_TESTS=OFF > /tmp/acbuild.log 2>&1 &&
       cmake --build /tmp/acbuild --target autoccl_nccl -j 16 >> /tmp/acbuild.log 2>&1; }; then
  tail -40 /tmp/acbuild.log
  return 1
fi
export AUTOCCL_LIB_DIR=/tmp/acbuild/lib PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
