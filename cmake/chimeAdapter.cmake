# SPDX-License-Identifier: MIT
# chime_add_adapter(): the library of one loop integration (event, uv, ev,
# glib...) and, with CHIME_BUILD_TESTS, its static twin on chime_internal.
#
# chime_add_adapter(<name> <source> <dependency-target> [HEADERS_ONLY])
#
# Makes chime_<name> (alias chime::<name>, exported as <name>) from <source>
# on chime::chime, and, for tests/integrations/, chime_<name>_internal: the
# same source on chime_internal (a test that links chime_internal must not
# also load libchime.so: two copies of every chime function).
#
# <dependency-target> is the loop library's imported target. It is PUBLIC
# on chime_<name> (the adapter's API is stated in the loop's types, so
# whoever uses it uses the loop too), unless HEADERS_ONLY: then chime_<name>
# takes only the target's include directories and compile options,
# PRIVATE, and links nothing of it (libevent: the application's libevent
# resolves the calls). The _internal twin always links it.
function(chime_add_adapter name source dep)
    cmake_parse_arguments(PARSE_ARGV 3 arg "HEADERS_ONLY" "" "")
    if(arg_UNPARSED_ARGUMENTS)
        message(FATAL_ERROR "chime_add_adapter(${name}): unknown arguments "
                            "${arg_UNPARSED_ARGUMENTS}")
    endif()
    set(lib chime_${name})
    add_library(${lib} ${source})
    add_library(chime::${name} ALIAS ${lib})
    set_target_properties(${lib} PROPERTIES
        C_STANDARD 11
        C_STANDARD_REQUIRED ON
        C_EXTENSIONS ON
        C_VISIBILITY_PRESET hidden
        VERSION ${PROJECT_VERSION}
        SOVERSION ${CHIME_ABI_VERSION}
        EXPORT_NAME ${name}
    )
    # chime::chime brings include/ and, for a static build,
    # CHIME_STATIC_DEFINE.
    if(arg_HEADERS_ONLY)
        target_include_directories(${lib} PRIVATE
            $<TARGET_PROPERTY:${dep},INTERFACE_INCLUDE_DIRECTORIES>)
        target_compile_options(${lib} PRIVATE
            $<TARGET_PROPERTY:${dep},INTERFACE_COMPILE_OPTIONS>)
        target_link_libraries(${lib}
            PUBLIC chime::chime
            PRIVATE $<BUILD_INTERFACE:chime_build_flags>
        )
    else()
        target_link_libraries(${lib}
            PUBLIC chime::chime ${dep}
            PRIVATE $<BUILD_INTERFACE:chime_build_flags>
        )
    endif()

    if(CHIME_BUILD_TESTS)
        add_library(${lib}_internal STATIC ${source})
        set_target_properties(${lib}_internal PROPERTIES
            C_STANDARD 11
            C_STANDARD_REQUIRED ON
            C_EXTENSIONS ON
        )
        target_link_libraries(${lib}_internal
            PUBLIC chime_internal ${dep} chime_build_flags
        )
    endif()
endfunction()
