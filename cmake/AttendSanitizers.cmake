# ATTEND_SANITIZE=address|undefined|thread adds the sanitizer to every target of this project.
if(ATTEND_SANITIZE)
  if(ATTEND_SANITIZE STREQUAL "address")
    set(_attend_san "-fsanitize=address,undefined")
  elseif(ATTEND_SANITIZE STREQUAL "undefined")
    set(_attend_san "-fsanitize=undefined")
  elseif(ATTEND_SANITIZE STREQUAL "thread")
    set(_attend_san "-fsanitize=thread")
  else()
    message(FATAL_ERROR "ATTEND_SANITIZE must be address, undefined or thread (got '${ATTEND_SANITIZE}')")
  endif()
  add_compile_options(${_attend_san} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  # Tests read it: under the instrumentation GCC does not contract x·y + z into an FMA (xsimd 8's
  # fma on AVX-512), so kernels that agree bit for bit in other builds may differ in the last bits.
  add_compile_definitions(ATTEND_SANITIZER_BUILD=1)
  add_link_options(${_attend_san})
endif()
