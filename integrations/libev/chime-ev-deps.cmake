# SPDX-License-Identifier: MIT
# Run by chimeConfig.cmake for find_package(chime COMPONENTS ev): libev
# ships no pkg-config module (nor CMake package) on Debian, so ev.h and the
# library are looked up directly and wrapped in the imported target that
# chime::ev links, CHIME_LIBEV::libev. Missing: _chime_missing says so.
if(NOT TARGET CHIME_LIBEV::libev)
    find_path(CHIME_LIBEV_INCLUDE_DIR ev.h PATH_SUFFIXES libev)
    find_library(CHIME_LIBEV_LIBRARY ev)
    if(CHIME_LIBEV_INCLUDE_DIR AND CHIME_LIBEV_LIBRARY)
        add_library(CHIME_LIBEV::libev UNKNOWN IMPORTED)
        set_target_properties(CHIME_LIBEV::libev PROPERTIES
            IMPORTED_LOCATION "${CHIME_LIBEV_LIBRARY}"
            INTERFACE_INCLUDE_DIRECTORIES "${CHIME_LIBEV_INCLUDE_DIR}")
    else()
        string(CONCAT _chime_missing "ev.h or libev not found (Debian: "
               "libev-dev); a library installed in another prefix needs "
               "CMAKE_PREFIX_PATH")
    endif()
endif()
