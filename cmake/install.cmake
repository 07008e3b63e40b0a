# cmake --install: the libraries, their headers and a CMake package, so that
# another project can
#   find_package(conform REQUIRED)
#   target_link_libraries(my_tests PRIVATE conform::properties)
# and run the oracle and the property suite in its own GoogleTest suite
# (examples/consumer, docs/install.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CONFORM_EXPORTED numerics io oracle impls properties reports)
foreach(lib ${CONFORM_EXPORTED})
  set_target_properties(conform_${lib} PROPERTIES EXPORT_NAME ${lib})
  install(DIRECTORY ${lib}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/conform/${lib} FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(DIRECTORY golden/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/conform/golden FILES_MATCHING PATTERN "*.hpp")
list(TRANSFORM CONFORM_EXPORTED PREPEND conform_ OUTPUT_VARIABLE CONFORM_EXPORTED_TARGETS)
install(TARGETS ${CONFORM_EXPORTED_TARGETS} EXPORT conformTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# conform::plugin: the plug-in headers alone (a kernel repository's plug-in
# target links it); conform::conform: the executable, for add_test(COMMAND
# conform::conform check-plugin ...) (examples/kernel-ci).
add_library(conform_plugin INTERFACE)
target_include_directories(conform_plugin INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(conform_plugin PROPERTIES EXPORT_NAME plugin)
install(TARGETS conform_plugin EXPORT conformTargets)
install(TARGETS conform EXPORT conformTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT conformTargets NAMESPACE conform:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/conform)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/conformConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/conformConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/conform)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/conformConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/conformConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/conformConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/conform)
