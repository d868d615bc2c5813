# SPDX-License-Identifier: MIT
# chime_install_component(): installs one optional part of chime (a loop
# integration: event, uv, ev, glib...) as a component of the CMake package,
# so that consumers write
#     find_package(chime REQUIRED COMPONENTS event)
#     target_link_libraries(myserver PRIVATE chime::event)
# chimeConfig.cmake knows no component by name: a component is available
# when its chime-<name>-targets.cmake is installed beside it, and usable when
# its dependency lookup (chime-<name>-deps.cmake, if any) succeeds.
#
# chime_install_component(<name>
#     TARGETS <target>...          # libraries, exported as chime::<EXPORT_NAME>
#     [HEADERS <file>...]          # installed into <includedir>/chime
#     [PKGCONFIG <file.pc.in>]     # configured (@ONLY) and installed as
#                                  # chime-<name>.pc
#     [PKG_DEPENDS <prefix> <module>...]
#                                  # chimeConfig.cmake finds the first of the
#                                  # pkg-config modules and imports it as
#                                  # PkgConfig::<prefix> (the name the
#                                  # targets link, if they link it)
#     [DEPS_FILE <file.cmake>]     # or: a lookup of your own, installed as
#                                  # chime-<name>-deps.cmake
#     [HINT <text>])               # where the dependency comes from
#                                  # ("Debian: libuv1-dev"), for the message
#
# Relative paths are relative to the calling CMakeLists.txt. Does nothing
# unless CHIME_INSTALL is ON (chime is the top-level project, or the parent
# asked for chime's install rules).
#
# A DEPS_FILE runs inside chimeConfig.cmake, in the consumer's project. It
# looks its dependency up quietly (QUIET; no REQUIRED) and, if it is
# missing, sets _chime_missing to a sentence saying what is missing and how
# to get it. It creates the imported targets the component's targets link.
# The helper _chime_pkg_dependency(<prefix> <hint> <module>...) of
# chimeConfig.cmake does the pkg-config case.
function(chime_install_component name)
    cmake_parse_arguments(PARSE_ARGV 1 arg ""
        "PKGCONFIG;DEPS_FILE;HINT" "TARGETS;HEADERS;PKG_DEPENDS")
    if(arg_UNPARSED_ARGUMENTS OR NOT arg_TARGETS)
        message(FATAL_ERROR "chime_install_component(${name}): needs TARGETS; "
                            "unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
    endif()
    if(arg_PKG_DEPENDS AND arg_DEPS_FILE)
        message(FATAL_ERROR "chime_install_component(${name}): PKG_DEPENDS "
                            "or DEPS_FILE, not both")
    endif()
    if(NOT CHIME_INSTALL)
        return()
    endif()

    install(TARGETS ${arg_TARGETS}
        EXPORT chime-${name}-targets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    )
    install(EXPORT chime-${name}-targets
        FILE chime-${name}-targets.cmake
        NAMESPACE chime::
        DESTINATION ${CHIME_CMAKE_DIR}
    )
    if(arg_HEADERS)
        install(FILES ${arg_HEADERS}
                DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/chime)
    endif()

    set(deps "${PROJECT_BINARY_DIR}/chime-${name}-deps.cmake")
    if(arg_DEPS_FILE)
        configure_file(${arg_DEPS_FILE} ${deps} COPYONLY)
        install(FILES ${deps} DESTINATION ${CHIME_CMAKE_DIR})
    elseif(arg_PKG_DEPENDS)
        list(GET arg_PKG_DEPENDS 0 prefix)
        list(REMOVE_AT arg_PKG_DEPENDS 0)
        if(NOT arg_PKG_DEPENDS)
            message(FATAL_ERROR "chime_install_component(${name}): "
                                "PKG_DEPENDS <prefix> <module>...")
        endif()
        string(REPLACE ";" " " modules "${arg_PKG_DEPENDS}")
        file(WRITE ${deps}
             "# Written by chime_install_component(${name}); run by "
             "chimeConfig.cmake.\n"
             "_chime_pkg_dependency(${prefix} \"${arg_HINT}\" ${modules})\n")
        install(FILES ${deps} DESTINATION ${CHIME_CMAKE_DIR})
    endif()

    if(arg_PKGCONFIG)
        # Written and installed like chime.pc (CHIME_PC_* come from the
        # top-level CMakeLists.txt).
        set(pc "${PROJECT_BINARY_DIR}/chime-${name}.pc")
        configure_file(${arg_PKGCONFIG} ${pc} @ONLY)
        install(CODE "set(CHIME_PC_FILE \"${pc}\")
set(CHIME_PC_NAME chime-${name}.pc)
set(CHIME_PC_DEST \"${CMAKE_INSTALL_LIBDIR}/pkgconfig\")")
        install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/chimeInstallPkgConfig.cmake)
    endif()
endfunction()
