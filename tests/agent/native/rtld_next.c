/* A program that does not use verbs but looks a symbol up with dlvsym(RTLD_NEXT, ...), as
 * any interposer does (an allocator, a profiler, another LD_PRELOAD tool).  Built three
 * ways from this file: libnext.so and libwrap.so both define icefab_probe@NEXT_1 (libwrap
 * wraps it and finds the next definition with RTLD_NEXT); the program links libwrap then
 * libnext and prints what libwrap's lookup found ("next=2" is right: libnext's).  Under a
 * shim that resolves RTLD_NEXT relative to itself the lookup starts after the shim, which
 * comes before libwrap, and finds libwrap's own definition ("next=1"). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#if defined(LIB_NEXT)
int icefab_probe(void) { return 2; }
#elif defined(LIB_WRAP)
int icefab_probe(void) { return 1; }

int call_next(void)
{
    int (*next)(void) = (int (*)(void))dlvsym(RTLD_NEXT, "icefab_probe", "NEXT_1");
    return next ? next() : -1;
}
#else
int call_next(void);

int main(void)
{
    int (*dflt)(void) = (int (*)(void))dlvsym(RTLD_DEFAULT, "icefab_probe", "NEXT_1");
    printf("next=%d default=%d\n", call_next(), dflt ? dflt() : -1);
    return 0;
}
#endif
