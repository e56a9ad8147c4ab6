// ATTEND_API marks attend's public interface. A shared libattend exports only these symbols
// (the build uses -fvisibility=hidden); a static build ignores the mark.
#pragma once

#if defined(_WIN32)
#define ATTEND_API
#else
#define ATTEND_API __attribute__((visibility("default")))
#endif
