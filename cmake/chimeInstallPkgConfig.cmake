# SPDX-License-Identifier: MIT
# Install-time step: installs a pkg-config file (chime.pc, chime-event.pc)
# with its prefix= line set to the prefix being installed to (which
# `cmake --install --prefix` may override).
# Set by install(CODE) before this script: CHIME_PC_FILE, CHIME_PC_DEST and
# CHIME_PC_NAME (the installed file name; default chime.pc).
file(READ "${CHIME_PC_FILE}" pc)
# The prefix= line follows the SPDX comment line: match it at a line start.
string(REGEX REPLACE "(^|\n)prefix=[^\n]*" "\\1prefix=${CMAKE_INSTALL_PREFIX}"
       pc "${pc}")
set(staged "${CHIME_PC_FILE}.install")
file(WRITE "${staged}" "${pc}")
if(IS_ABSOLUTE "${CHIME_PC_DEST}")
    set(dest "${CHIME_PC_DEST}")
else()
    set(dest "${CMAKE_INSTALL_PREFIX}/${CHIME_PC_DEST}")
endif()
if(NOT CHIME_PC_NAME)
    set(CHIME_PC_NAME chime.pc)
endif()
file(INSTALL DESTINATION "${dest}" TYPE FILE RENAME "${CHIME_PC_NAME}"
     FILES "${staged}")
