# ctest install_consumer: install this build into a scratch prefix, then
# configure, build and run examples/consumer against the installed package.
# -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
file(REMOVE_RECURSE ${WORK_DIR})
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "install_consumer: ${what}: ok")
endfunction()
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
step("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build -G Ninja
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step("run the consumer's tests" ${WORK_DIR}/build/consumer_test)
# The kernel repository's CI gate (examples/kernel-ci): its plug-in built
# against the installed package passes check-plugin against its committed
# profiles, and the regressed build fails the gate.
step("configure the kernel CI example" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/kernel-ci -B ${WORK_DIR}/kernel-ci -G Ninja
     -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
step("build the kernel CI example" ${CMAKE_COMMAND} --build ${WORK_DIR}/kernel-ci)
step("run its conform gate" ${CMAKE_COMMAND} -E chdir ${WORK_DIR}/kernel-ci ctest --output-on-failure)
if(NOT EXISTS ${WORK_DIR}/kernel-ci/conform-report/junit.xml)
  message(FATAL_ERROR "install_consumer: the gate wrote no junit.xml")
endif()
step("configure the regressed kernel" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/kernel-ci -B ${WORK_DIR}/kernel-ci-sloppy
     -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DMY_KERNELS_SLOPPY=ON)
step("build the regressed kernel" ${CMAKE_COMMAND} --build ${WORK_DIR}/kernel-ci-sloppy)
execute_process(COMMAND ${CMAKE_COMMAND} -E chdir ${WORK_DIR}/kernel-ci-sloppy ctest --output-on-failure
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "install_consumer: the regressed kernel passed the conform gate:\n${out}")
endif()
message(STATUS "install_consumer: the regressed kernel fails the gate: ok")

