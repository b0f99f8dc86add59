/* One JSON line per recorded call, appended to $FAKEVERBS_LOG (O_APPEND: small writes from
 * several threads and libraries stay whole lines). */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void fake_log(const char *fmt, ...)
{
    const char *path = getenv("FAKEVERBS_LOG");
    if (!path)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    buf[n] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        if (write(fd, buf, n + 1) < 0) {
        }
        close(fd);
    }
}
