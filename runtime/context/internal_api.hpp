// ATTEND_INTERNAL marks the few runtime functions attend_layer calls in attend_core (the
// detail:: interface between attend's own two libraries). A shared libattend_core exports them
// beside the public API; nothing in include/attend names them, and they carry no stability promise
// beyond the library's own version (both libraries are built and installed together).
#pragma once

#define ATTEND_INTERNAL __attribute__((visibility("default")))
